package io.mcore4j.checkpoint;

import io.mcore4j.checkpoint.json.Json;
import io.mcore4j.core.shard.ShardedTensor;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * What one rank declares about one of its shards when saving: the part of a {@link ShardedTensor}
 * that travels between ranks (no data). Rank 0 gathers every rank's entries to validate coverage
 * and to write the metadata.
 *
 * @param key the tensor key
 * @param dtype storage dtype
 * @param globalShape shape of the whole tensor
 * @param box the block this shard holds
 * @param replicaId 0 for the main (writing) replica
 * @param rank the world rank that holds it
 */
record ShardEntry(String key, SafetensorsDtype dtype, long[] globalShape, Box box, int replicaId, int rank) {

    ShardEntry {
        globalShape = globalShape.clone();
    }

    @Override
    public long[] globalShape() {
        return globalShape.clone();
    }

    boolean isMain() {
        return replicaId == 0;
    }

    /** @return the name of this shard inside its file: the key, then {@code @} and the offsets (none for a scalar) */
    String tensorName() {
        if (box.dims() == 0) {
            return key;
        }
        StringBuilder b = new StringBuilder(key).append('@');
        for (int d = 0; d < box.dims(); d++) {
            b.append(d == 0 ? "" : ",").append(box.offset(d));
        }
        return b.toString();
    }

    /** @return the shard file a rank writes */
    static String fileName(int rank) {
        return String.format("rank_%05d.safetensors", rank);
    }

    /** @return whether {@code name} is a shard file name this module writes */
    static boolean isShardFileName(String name) {
        return name.matches("rank_\\d{5,}\\.safetensors");
    }

    static ShardEntry of(ShardedTensor t, int rank) {
        long[] local = t.data().getShape().getShape();
        return new ShardEntry(t.key(), SafetensorsDtype.of(t.dtype()), t.globalShape(),
                new Box(t.globalOffset(), local), t.replicaId(), rank);
    }

    static byte[] encode(List<ShardEntry> entries) {
        List<Object> list = new ArrayList<>(entries.size());
        for (ShardEntry e : entries) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("k", e.key);
            m.put("t", e.dtype.name());
            m.put("g", longs(e.globalShape));
            m.put("o", longs(e.box.offset()));
            m.put("s", longs(e.box.shape()));
            m.put("r", (long) e.replicaId);
            list.add(m);
        }
        return Json.write(list).getBytes(StandardCharsets.UTF_8);
    }

    static List<ShardEntry> decode(byte[] bytes, int rank) {
        List<?> list = (List<?>) Json.parse(new String(bytes, StandardCharsets.UTF_8));
        List<ShardEntry> out = new ArrayList<>(list.size());
        for (Object o : list) {
            Map<?, ?> m = (Map<?, ?>) o;
            out.add(new ShardEntry((String) m.get("k"), SafetensorsDtype.valueOf((String) m.get("t")),
                    unboxed(m.get("g")), new Box(unboxed(m.get("o")), unboxed(m.get("s"))),
                    ((Long) m.get("r")).intValue(), rank));
        }
        return out;
    }

    private static List<Object> longs(long[] values) {
        List<Object> out = new ArrayList<>(values.length);
        for (long v : values) {
            out.add(v);
        }
        return out;
    }

    private static long[] unboxed(Object list) {
        List<?> l = (List<?>) list;
        long[] out = new long[l.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = (Long) l.get(i);
        }
        return out;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof ShardEntry e && key.equals(e.key) && dtype == e.dtype
                && Arrays.equals(globalShape, e.globalShape) && box.equals(e.box) && replicaId == e.replicaId
                && rank == e.rank;
    }

    @Override
    public int hashCode() {
        return key.hashCode() * 31 + box.hashCode();
    }

    @Override
    public String toString() {
        return key + box + (replicaId == 0 ? "" : " replica " + replicaId) + " on rank " + rank;
    }
}
