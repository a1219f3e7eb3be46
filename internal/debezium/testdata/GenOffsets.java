// Generates the offset-file fixtures of internal/debezium's tests as Kafka
// Connect's FileOffsetBackingStore writes them (a Java-serialized
// HashMap<byte[],byte[]>), plus shapes that must be refused. Run from this
// directory with Java 17 or newer: java GenOffsets.java
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;

public class GenOffsets {
  static byte[] b(String s) { return s.getBytes(StandardCharsets.UTF_8); }

  static void write(String file, Object o) throws IOException {
    try (ObjectOutputStream os = new ObjectOutputStream(new FileOutputStream(file))) { os.writeObject(o); }
  }

  public static void main(String[] a) throws Exception {
    HashMap<byte[], byte[]> one = new HashMap<>();
    one.put(b("[\"outbox-debezium\",{\"server\":\"dbz\"}]"),
        b("{\"transaction_id\":null,\"ts_sec\":1700000000,\"file\":\"mysql-bin.000003\",\"pos\":1234,\"gtids\":\"0-1-41\",\"event\":2,\"row\":1,\"server_id\":1}"));
    write("offsets-one.dat", one);

    HashMap<byte[], byte[]> two = new HashMap<>();
    two.put(b("[\"orders-outbox\",{\"server\":\"orders\"}]"), b("{\"file\":\"binlog.000007\",\"pos\":4711,\"gtids\":\"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-77\"}"));
    two.put(b("[\"billing-outbox\",{\"server\":\"billing\"}]"), b("{\"file\":\"binlog.000002\",\"pos\":99}"));
    two.put(b("[\"billing-outbox\",{\"server\":\"old\"}]"), null); // an offset deleted
    two.put(b("[\"file-source\",{\"filename\":\"/var/log/app.log\"}]"), b("{\"position\":1024}"));
    write("offsets-several.dat", two);

    write("offsets-empty.dat", new HashMap<byte[], byte[]>());

    HashMap<byte[], byte[]> snap = new HashMap<>();
    snap.put(b("[\"outbox-debezium\",{\"server\":\"dbz\"}]"), b("{\"file\":\"mysql-bin.000001\",\"pos\":328,\"snapshot\":\"INITIAL\",\"snapshot_completed\":false}"));
    write("offsets-snapshot.dat", snap);

    // 300 entries: back references past one byte, block data around them.
    HashMap<byte[], byte[]> many = new HashMap<>();
    for (int i = 0; i < 300; i++) {
      many.put(b("[\"c" + i + "\",{\"server\":\"s" + i + "\"}]"), b("{\"file\":\"mysql-bin.000001\",\"pos\":" + (4 + i) + "}"));
    }
    write("offsets-many.dat", many);

    // Shapes a strict reader refuses: another map type, other element types.
    HashMap<String, String> strings = new HashMap<>();
    strings.put("[\"outbox-debezium\",{\"server\":\"dbz\"}]", "{\"file\":\"mysql-bin.000003\",\"pos\":4}");
    write("hostile-strings.dat", strings);
    java.util.LinkedHashMap<byte[], byte[]> linked = new java.util.LinkedHashMap<>();
    linked.put(b("[\"x\",{\"server\":\"y\"}]"), b("{}"));
    write("hostile-linkedhashmap.dat", linked);
    // The same array as key and value: a back reference to an array.
    HashMap<byte[], byte[]> shared = new HashMap<>();
    byte[] same = b("[\"x\",{\"server\":\"y\"}]");
    shared.put(same, same);
    write("offsets-shared-array.dat", shared);
  }
}
