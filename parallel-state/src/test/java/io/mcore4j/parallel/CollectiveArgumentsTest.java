package io.mcore4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.pytorch.jni.JniUtils;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.testing.NativeArrays;

import java.util.List;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/** The checks and descriptions every backend shares, without communicating: rank 1 of group {@code tp[4,6,8]}. */
class CollectiveArgumentsTest {
    private static final ProcessGroup GROUP = ProcessGroup.of("tp", new int[] {4, 6, 8}, 6);
    private final CollectiveArguments args = new CollectiveArguments(GROUP, "TCP", List.of(DataType.FLOAT32, DataType.INT64));
    private NDManager m;

    @BeforeEach
    void open() {
        m = Mcore4j.newRootManager();
    }

    @AfterEach
    void close() {
        m.close();
    }

    private static String rejected(Executable call) {
        return assertThrows(IllegalArgumentException.class, call).getMessage();
    }

    @Test
    void describesCallsByOperationDtypeAndShape() {
        assertEquals("all-reduce SUM float32 (2, 1)", args.describe("all-reduce SUM", m.zeros(new Shape(2, 1))));
        assertEquals("all-to-all float32 [*, 3]", CollectiveArguments.describeAllToAll(m.zeros(new Shape(5, 3))));
        assertEquals("all-to-all int64 [*, 3, 2]", CollectiveArguments.describeAllToAll(m.zeros(new Shape(0, 3, 2), DataType.INT64)));
        assertEquals("all-to-all float32 [*]", CollectiveArguments.describeAllToAll(m.zeros(new Shape(4))));
        assertEquals("send float32 (2) to rank 8", args.describeSend(m.zeros(new Shape(2)), 2));
        assertEquals("recv int64 (3, 1) from rank 4", args.describeRecv(new Shape(3, 1), DataType.INT64, 0));
    }

    @Test
    void unsupportedDtypesNameTheCallAndTheBackend() {
        String msg = rejected(() -> args.describe("all-reduce SUM", m.zeros(new Shape(2), DataType.INT32)));
        assertEquals("tp[4,6,8] all-reduce SUM int32 (2): dtype int32 is not supported by the TCP backend; "
                + "use one of [float32, int64]", msg);
        assertEquals(List.of(DataType.FLOAT32, DataType.INT64), args.dtypes());
    }

    @Test
    void dimsAndPeersAreCheckedAgainstTheShapeAndTheGroup() {
        NDArray x = m.zeros(new Shape(6, 4));
        assertEquals(1, args.checkDim(x, -1));
        assertEquals(0, args.checkDim(x, -2));
        assertEquals("tp[4,6,8]: dim 2 is out of range for shape (6, 4)", rejected(() -> args.checkDim(x, 2)));
        assertEquals("tp[4,6,8]: dim -3 is out of range for shape (6, 4)", rejected(() -> args.checkDim(x, -3)));
        assertEquals(0, args.checkScatterDim(x, 0));
        assertEquals("tp[4,6,8] reduce-scatter: dim 1 of shape (6, 4) is not divisible by the group size 3",
                rejected(() -> args.checkScatterDim(x, -1)));
        args.checkPeer(2, "broadcast root");
        assertEquals("tp[4,6,8]: broadcast root 3 is outside [0, 3)", rejected(() -> args.checkPeer(3, "broadcast root")));
        assertEquals("tp[4,6,8]: send destination -1 is outside [0, 3)", rejected(() -> args.describeSend(x, -1)));
        assertEquals("tp[4,6,8]: receive source 3 is outside [0, 3)", rejected(() -> args.describeRecv(new Shape(1), DataType.FLOAT32, 3)));
    }

    @Test
    void allToAllSplitsAreCheckedBeforeAnythingMoves() {
        NDArray x = m.zeros(new Shape(5, 2));
        assertEquals(7, args.checkSplits(x, new long[] {1, 0, 4}, new long[] {2, 2, 3}));
        assertEquals("tp[4,6,8] all-to-all: 2 send and 3 receive splits for a group of 3",
                rejected(() -> args.checkSplits(x, new long[] {1, 4}, new long[] {1, 1, 1})));
        assertEquals("tp[4,6,8] all-to-all: send splits [1, 1, 1] sum to 3 but the input has 5 rows",
                rejected(() -> args.checkSplits(x, new long[] {1, 1, 1}, new long[] {1, 1, 1})));
        assertEquals("tp[4,6,8] all-to-all: negative split in [6, -1, 0] / [1, 1, 1]",
                rejected(() -> args.checkSplits(x, new long[] {6, -1, 0}, new long[] {1, 1, 1})));
        assertEquals("tp[4,6,8] all-to-all: the input needs at least one dim, got a scalar",
                rejected(() -> args.checkSplits(m.create(1f), new long[] {0, 0, 0}, new long[] {0, 0, 0})));
    }

    @Test
    void mismatchesFoundDuringTheExchangeNameTheSender() {
        CommunicationException e = args.unexpectedRows("all-to-all float32 [*, 2]", 2, 3, 1);
        assertEquals("tp[4,6,8] all-to-all float32 [*, 2]: rank 8 sends 3 rows to rank 6, which expects 1", e.getMessage());
        assertEquals(List.of(8), e.ranks());
        e = args.unexpectedRows("all-to-all float32 [*, 2]", 1, 3, 1);
        assertEquals("tp[4,6,8] all-to-all float32 [*, 2]: rank 6 sends 3 rows to itself but expects 1", e.getMessage());
        e = args.unexpectedTensor("recv int64 (2) from rank 4", 0, DataType.INT32, new Shape(2), DataType.INT64, new Shape(2));
        assertEquals("tp[4,6,8] recv int64 (2) from rank 4: rank 4 sent int32 (2) but int64 (2) was expected", e.getMessage());
        assertEquals(List.of(4), e.ranks());
    }

    @Test
    void resultsAreOwnedCopiesMadeWithoutGrad() {
        NDArray x = m.ones(new Shape(2, 2));
        x.setRequiresGradient(true);
        boolean before = JniUtils.isGradMode();
        try (NDManager owner = m.newSubManager()) {
            int live = NativeArrays.live(owner);
            NDArray copy = CollectiveResults.withoutGrad(() -> {
                assertFalse(JniUtils.isGradMode(), "grad mode is off inside");
                return CollectiveResults.copyOwnedBy(x, owner);
            });
            assertSame(owner, copy.getManager());
            assertEquals(live + 1, NativeArrays.live(owner));
            assertEquals(4f, copy.sum().getFloat());
        }
        assertEquals(before, JniUtils.isGradMode(), "grad mode restored");
        assertThrows(IllegalStateException.class, () -> CollectiveResults.withoutGrad(() -> {
            throw new IllegalStateException("boom");
        }));
        assertEquals(before, JniUtils.isGradMode(), "grad mode restored after a failure");
    }
}
