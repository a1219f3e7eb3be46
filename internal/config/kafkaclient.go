package config

import (
	"context"
	"fmt"
	"os"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Auth returns the SASL mechanism configured, nil for none. OAUTHBEARER's
// token_file and AWS_MSK_IAM's files and environment variables are read at
// each authentication, so rotated credentials are picked up.
func (s SASL) Auth() (sasl.Mechanism, error) {
	switch s.Mechanism {
	case "":
		return nil, nil
	case SASLPlain:
		return plain.Auth{User: s.User, Pass: s.Password}.AsMechanism(), nil
	case SASLScramSHA256:
		return scram.Auth{User: s.User, Pass: s.Password}.AsSha256Mechanism(), nil
	case SASLScramSHA512:
		return scram.Auth{User: s.User, Pass: s.Password}.AsSha512Mechanism(), nil
	case SASLOAuthBearer:
		return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
			tok := s.Token
			if s.TokenFile != "" {
				t, err := readSecret(s.TokenFile)
				if err != nil {
					return oauth.Auth{}, fmt.Errorf("read kafka.sasl.token_file: %w", err)
				}
				tok = t
			}
			return oauth.Auth{Token: tok, Extensions: s.Extensions}, nil
		}), nil
	case SASLAWSMSKIAM:
		return aws.ManagedStreamingIAM(func(context.Context) (aws.Auth, error) {
			return s.awsAuth()
		}), nil
	}
	return nil, fmt.Errorf("kafka.sasl.mechanism %q is not supported", s.Mechanism)
}

// awsAuth reads the AWS credentials: the configured ones, else the
// standard environment variables.
func (s SASL) awsAuth() (aws.Auth, error) {
	key, secret, session := s.AccessKeyID, s.SecretAccessKey, s.SessionToken
	if s.SecretAccessKeyFile != "" {
		v, err := readSecret(s.SecretAccessKeyFile)
		if err != nil {
			return aws.Auth{}, fmt.Errorf("read kafka.sasl.secret_access_key_file: %w", err)
		}
		secret = v
	}
	if s.SessionTokenFile != "" {
		v, err := readSecret(s.SessionTokenFile)
		if err != nil {
			return aws.Auth{}, fmt.Errorf("read kafka.sasl.session_token_file: %w", err)
		}
		session = v
	}
	if key == "" {
		key, secret, session = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), os.Getenv("AWS_SESSION_TOKEN")
		if key == "" || secret == "" {
			return aws.Auth{}, fmt.Errorf("kafka.sasl AWS_MSK_IAM: no access_key_id configured and AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY not set")
		}
	}
	return aws.Auth{AccessKey: key, SecretKey: secret, SessionToken: session}, nil
}
