package router

import "fmt"

// The topic a row goes to, by its aggregate type (Router.last remembers
// the last one).

// topicOf is the topic rows of aggregate type aggType go to.
type topicOf struct{ aggType, topic string }

// topic is the topic of aggregate type aggType, or an error wrapping
// ErrBadRow when it is no valid or a reserved topic name.
func (r *Router) topic(aggType string) (string, error) {
	if t := r.last.Load(); t != nil && t.aggType == aggType {
		return t.topic, nil
	}
	c := &r.cfg
	var topic string
	if c.TopicReplacement != "" {
		topic = c.TopicRegex.ReplaceAllString(aggType, c.TopicReplacement)
	} else {
		topic = c.TopicPrefix + aggType
	}
	if err := ValidTopic(topic); err != nil {
		return topic, fmt.Errorf("%w: column %q: %v", ErrBadRow, c.AggregateTypeColumn, err)
	}
	if why := c.Reserved.Refuses(topic); why != "" {
		return topic, fmt.Errorf("%w: column %q: %s", ErrBadRow, c.AggregateTypeColumn, why)
	}
	r.last.Store(&topicOf{aggType: aggType, topic: topic})
	return topic, nil
}
