package io.mcore4j.checkpoint;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Checks, before a save writes anything, that the main replicas of every tensor tile it exactly:
 * every rank declares the same dtype and global shape, all boxes lie inside that shape, and the
 * main replicas neither overlap nor leave a gap ({@link Tiling}), so every element is written
 * exactly once.
 */
final class ShardCoverage {
    private ShardCoverage() {}

    /**
     * @param entries every rank's shard entries
     * @return the main replicas grouped by key (sorted), each list sorted by offset
     * @throws InvalidShardingException naming the key on the first inconsistency, overlap or gap
     */
    static Map<String, List<ShardEntry>> validate(List<ShardEntry> entries) {
        Map<String, List<ShardEntry>> byKey = new TreeMap<>();
        for (ShardEntry e : entries) {
            byKey.computeIfAbsent(e.key(), k -> new ArrayList<>()).add(e);
        }
        Map<String, List<ShardEntry>> mains = new TreeMap<>();
        for (Map.Entry<String, List<ShardEntry>> group : byKey.entrySet()) {
            mains.put(group.getKey(), validateKey(group.getKey(), group.getValue()));
        }
        return mains;
    }

    private static List<ShardEntry> validateKey(String key, List<ShardEntry> all) {
        ShardEntry reference = all.get(0);
        List<ShardEntry> mains = new ArrayList<>();
        for (ShardEntry e : all) {
            if (e.dtype() != reference.dtype() || !Arrays.equals(e.globalShape(), reference.globalShape())) {
                throw new InvalidShardingException("key \"" + key + "\": rank " + reference.rank() + " declares "
                        + reference.dtype() + " " + Arrays.toString(reference.globalShape()) + " but rank " + e.rank()
                        + " declares " + e.dtype() + " " + Arrays.toString(e.globalShape()));
            }
            if (!e.box().fitsIn(e.globalShape())) {
                throw new InvalidShardingException("key \"" + key + "\": block " + e.box() + " of rank " + e.rank()
                        + " lies outside the global shape " + Arrays.toString(e.globalShape()));
            }
            if (e.isMain()) {
                mains.add(e);
            }
        }
        long globalVolume = new Box(new long[reference.globalShape().length], reference.globalShape()).volume();
        if (mains.isEmpty()) {
            if (globalVolume == 0) {
                return mains;
            }
            throw new InvalidShardingException("key \"" + key + "\": no rank holds a main replica (replicaId 0), so "
                    + "nothing would write its " + globalVolume + " elements; replicas seen: " + describe(all));
        }
        List<Box> boxes = mains.stream().map(ShardEntry::box).toList();
        Tiling.Problem problem = Tiling.check(reference.globalShape(), boxes);
        if (problem instanceof Tiling.Overlap o) {
            ShardEntry a = mains.get(o.first());
            ShardEntry b = mains.get(o.second());
            throw new InvalidShardingException("key \"" + key + "\": the main replicas of rank " + a.rank() + " "
                    + a.box() + " and rank " + b.rank() + " " + b.box() + " overlap in " + o.common()
                    + "; each element needs exactly one main replica (replicaId 0) - mark the copies with a non-zero"
                    + " replicaId");
        }
        if (problem instanceof Tiling.Gap g) {
            throw new InvalidShardingException("key \"" + key + "\": main replicas cover " + g.covered() + " of "
                    + g.total() + " elements of global shape " + Arrays.toString(reference.globalShape())
                    + ", leaving a gap (" + g.describe() + "); main replicas: " + describe(mains));
        }
        List<ShardEntry> sorted = new ArrayList<>(mains);
        sorted.sort(ShardCoverage::compareOffsets);
        return sorted;
    }

    /** Lexicographic order of offsets: the order shards are listed in the metadata. */
    static int compareOffsets(ShardEntry a, ShardEntry b) {
        return Arrays.compare(a.box().offset(), b.box().offset());
    }

    private static String describe(List<ShardEntry> entries) {
        StringBuilder b = new StringBuilder();
        int shown = Math.min(entries.size(), 8);
        for (int i = 0; i < shown; i++) {
            ShardEntry e = entries.get(i);
            b.append(i == 0 ? "" : ", ").append("rank ").append(e.rank()).append(' ').append(e.box());
            if (!e.isMain()) {
                b.append(" (replica ").append(e.replicaId()).append(')');
            }
        }
        if (entries.size() > shown) {
            b.append(", ... (").append(entries.size() - shown).append(" more)");
        }
        return b.toString();
    }
}
