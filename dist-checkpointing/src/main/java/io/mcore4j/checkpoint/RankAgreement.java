package io.mcore4j.checkpoint;

import io.mcore4j.checkpoint.json.Json;
import io.mcore4j.parallel.Communicator;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

/**
 * Makes every rank of a collective step reach the same outcome: each rank contributes its payload
 * and its own failure (or none) through one {@code allGatherBytes} over the world; if any rank
 * failed, every rank throws the same exception type with the same message, naming the lowest failing
 * rank. Without this a rank that fails alone would leave the others waiting in the next collective.
 */
final class RankAgreement {
    private static final byte OK = 0;
    private static final byte FAILED = 1;

    private RankAgreement() {}

    /**
     * Gathers every rank's payload, or throws on every rank if any rank failed.
     *
     * @param world communicator over all ranks of the checkpoint
     * @param step what the ranks were doing, for the message (e.g. "saving /ckpt/iter_0000100")
     * @param payload this rank's bytes (ignored when {@code localFailure} is set)
     * @param localFailure this rank's failure, or null
     * @return the payloads in rank order
     * @throws CheckpointException of the failing rank's type, on every rank
     */
    static List<byte[]> exchange(Communicator world, String step, byte[] payload, Throwable localFailure) {
        byte[] message;
        if (localFailure == null) {
            message = new byte[payload.length + 1];
            message[0] = OK;
            System.arraycopy(payload, 0, message, 1, payload.length);
        } else {
            byte[] json = Json.write(Map.of("kind", FailureKind.of(localFailure).name(), "message", String.valueOf(describe(localFailure))))
                    .getBytes(StandardCharsets.UTF_8);
            message = new byte[json.length + 1];
            message[0] = FAILED;
            System.arraycopy(json, 0, message, 1, json.length);
        }
        List<byte[]> gathered = world.allGatherBytes(message);
        List<byte[]> payloads = new ArrayList<>(gathered.size());
        List<String> failures = new ArrayList<>();
        FailureKind kind = FailureKind.OTHER;
        String first = null;
        for (int r = 0; r < gathered.size(); r++) {
            byte[] m = gathered.get(r);
            byte[] body = Arrays.copyOfRange(m, 1, m.length);
            if (m[0] == OK) {
                payloads.add(body);
                continue;
            }
            Map<?, ?> failure = (Map<?, ?>) Json.parse(new String(body, StandardCharsets.UTF_8));
            if (first == null) {
                kind = FailureKind.valueOf((String) failure.get("kind"));
                first = (String) failure.get("message");
            }
            failures.add("rank " + r);
        }
        if (first == null) {
            return payloads;
        }
        String agreed = first + " [" + step + "; failed on " + String.join(", ", failures) + "]";
        throw kind.create(agreed, localFailure);
    }

    /**
     * Throws on every rank if any rank failed; returns normally on every rank otherwise.
     *
     * @param world communicator over all ranks
     * @param step what the ranks were doing
     * @param localFailure this rank's failure, or null
     */
    static void agree(Communicator world, String step, Throwable localFailure) {
        exchange(world, step, new byte[0], localFailure);
    }

    private static String describe(Throwable t) {
        if (t instanceof CheckpointException) {
            return t.getMessage();
        }
        return t.getClass().getSimpleName() + ": " + t.getMessage();
    }

    /** What kind of failure a rank reports, so that every rank throws the same exception type. */
    private enum FailureKind {
        SHARDING, CORRUPT, INCOMPATIBLE, OTHER;

        static FailureKind of(Throwable t) {
            if (t instanceof InvalidShardingException) {
                return SHARDING;
            }
            if (t instanceof CorruptCheckpointException) {
                return CORRUPT;
            }
            if (t instanceof IncompatibleCheckpointException) {
                return INCOMPATIBLE;
            }
            return OTHER;
        }

        CheckpointException create(String message, Throwable cause) {
            return switch (this) {
                case SHARDING -> new InvalidShardingException(message, cause);
                case CORRUPT -> new CorruptCheckpointException(message, cause);
                case INCOMPATIBLE -> new IncompatibleCheckpointException(message, cause);
                case OTHER -> new CheckpointException(message, cause);
            };
        }
    }
}
