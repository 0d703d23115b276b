package io.mcore4j.checkpoint;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

/**
 * Checks, by box arithmetic, that the main replicas of every tensor tile it exactly: all boxes lie
 * inside the global shape, no two overlap, and their volumes sum to the global volume (together
 * these mean every element is written exactly once). Cost is a sort plus a sweep per tensor, not a
 * pass over elements.
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
        int sweepDim = mostVariedDim(mains);
        List<ShardEntry> sorted = new ArrayList<>(mains);
        sorted.sort(Comparator.<ShardEntry>comparingLong(e -> sweepDim < 0 ? 0 : e.box().offset(sweepDim))
                .thenComparing(ShardCoverage::compareOffsets));
        long covered = 0;
        for (int i = 0; i < sorted.size(); i++) {
            Box a = sorted.get(i).box();
            covered = Math.addExact(covered, a.volume());
            for (int j = i + 1; j < sorted.size(); j++) {
                Box b = sorted.get(j).box();
                if (sweepDim >= 0 && b.offset(sweepDim) >= a.end(sweepDim)) {
                    break; // sorted by start along the sweep dim: no later box can reach back into a
                }
                Box common = a.intersect(b);
                if (common != null) {
                    throw new InvalidShardingException("key \"" + key + "\": the main replicas of rank "
                            + sorted.get(i).rank() + " " + a + " and rank " + sorted.get(j).rank() + " " + b
                            + " overlap in " + common + "; each element needs exactly one main replica (replicaId 0)"
                            + " - mark the copies with a non-zero replicaId");
                }
            }
        }
        if (covered != globalVolume) {
            throw new InvalidShardingException("key \"" + key + "\": main replicas cover " + covered + " of "
                    + globalVolume + " elements of global shape " + Arrays.toString(reference.globalShape())
                    + ", leaving a gap; main replicas: " + describe(mains));
        }
        sorted.sort(ShardCoverage::compareOffsets);
        return sorted;
    }

    /** Lexicographic order of offsets: the order shards are listed in the metadata. */
    static int compareOffsets(ShardEntry a, ShardEntry b) {
        return Arrays.compare(a.box().offset(), b.box().offset());
    }

    /** The dim along which boxes start at the most distinct offsets: sweeping along it prunes the most pairs. */
    private static int mostVariedDim(List<ShardEntry> boxes) {
        int dims = boxes.get(0).box().dims();
        int best = -1;
        int bestCount = 0;
        for (int d = 0; d < dims; d++) {
            Set<Long> starts = new HashSet<>();
            for (ShardEntry e : boxes) {
                starts.add(e.box().offset(d));
            }
            if (starts.size() > bestCount) {
                best = d;
                bestCount = starts.size();
            }
        }
        return best;
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
