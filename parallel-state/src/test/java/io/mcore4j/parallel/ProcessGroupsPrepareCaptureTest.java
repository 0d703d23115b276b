package io.mcore4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.lang.reflect.Proxy;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;

class ProcessGroupsPrepareCaptureTest {

    /** A backend whose communicators record their prepareCapture calls and answer group() and timeout(). */
    private static final class RecordingBackend implements Backend {
        final List<String> prepared = new ArrayList<>();
        final int rank;
        int created;

        RecordingBackend(int rank) {
            this.rank = rank;
        }

        @Override
        public int worldRank() {
            return rank;
        }

        @Override
        public int worldSize() {
            return 8;
        }

        @Override
        public Communicator communicator(ProcessGroup group) {
            created++;
            return (Communicator) Proxy.newProxyInstance(Communicator.class.getClassLoader(),
                    new Class<?>[] {Communicator.class}, (proxy, method, args) -> switch (method.getName()) {
                        case "prepareCapture" -> {
                            prepared.add(group.key());
                            yield null;
                        }
                        case "group" -> group;
                        case "timeout" -> Duration.ofSeconds(1);
                        case "hashCode" -> System.identityHashCode(proxy);
                        case "equals" -> proxy == args[0];
                        case "toString" -> "recording " + group.key();
                        default -> throw new UnsupportedOperationException(method.getName());
                    });
        }

        @Override
        public void close() {
        }
    }

    @Test
    void everyCommunicatorIsPreparedOnceInTheOrderOfCreationOnEveryRank() {
        List<List<String>> orders = new ArrayList<>();
        for (int rank : new int[] {0, 5}) {
            RecordingBackend backend = new RecordingBackend(rank);
            ProcessGroups groups = ProcessGroups.create(ParallelDims.of(8, 2, 2), backend);
            groups.prepareCapture();
            assertEquals(backend.created, backend.prepared.size(), "each communicator once: " + backend.prepared);
            orders.add(backend.prepared.stream().map(k -> k.substring(0, k.indexOf('['))).toList());
        }
        assertEquals(orders.get(0), orders.get(1), "the groups in the same order on every rank");
    }
}
