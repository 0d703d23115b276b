package io.mcore4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.time.Duration;
import java.util.List;

import org.junit.jupiter.api.Test;

class P2pCommunicationTest {
    private static final Shape SHAPE = new Shape(3, 2, 4);

    static NDArray filled(NDManager m, Shape shape, float base) {
        float[] v = new float[(int) shape.size()];
        for (int i = 0; i < v.length; i++) {
            v[i] = base + i;
        }
        return m.create(v, shape);
    }

    @Test
    void combinedTransfersPairUpInLockStep() {
        List<float[]> got = InJvmWorld.run(2, Duration.ofSeconds(20), rank -> {
            P2pCommunication p2p = new P2pCommunication(rank.groups(ParallelDims.of(2, 1, 2)).pp(), SHAPE,
                    DataType.FLOAT32, false);
            NDManager m = rank.manager();
            if (p2p.stage() == 0) {
                assertEquals(1, p2p.nextStage());
                p2p.sendForward(filled(m, SHAPE, 0));
                NDArray g0 = p2p.sendForwardRecvBackward(filled(m, SHAPE, 100), m);
                NDArray g1 = p2p.recvBackward(SHAPE, m);
                return concat(g0.toFloatArray(), g1.toFloatArray());
            }
            assertEquals(0, p2p.previousStage());
            NDArray x0 = p2p.recvForward(m);
            NDArray x1 = p2p.sendBackwardRecvForward(x0.mul(-1), m);
            p2p.sendBackward(x1.mul(-1));
            return concat(x0.toFloatArray(), x1.toFloatArray());
        });
        float[] expectedActivations = concat(filled0(0), filled0(100));
        assertArrayEquals(expectedActivations, got.get(1), 0f);
        float[] negated = expectedActivations.clone();
        for (int i = 0; i < negated.length; i++) {
            negated[i] = -negated[i];
        }
        assertArrayEquals(negated, got.get(0), 0f);
    }

    @Test
    void variableLengthsSendTheShapeFirst() {
        List<long[]> shapes = InJvmWorld.run(2, Duration.ofSeconds(20), rank -> {
            P2pCommunication p2p = new P2pCommunication(rank.groups(ParallelDims.of(2, 1, 2)).pp(), SHAPE,
                    DataType.FLOAT32, true);
            if (p2p.stage() == 0) {
                p2p.sendForward(filled(rank.manager(), new Shape(5, 2, 4), 1));
                p2p.sendForward(filled(rank.manager(), new Shape(1, 2, 4), 2));
                return new long[0];
            }
            NDArray a = p2p.recvForward(rank.manager());
            NDArray b = p2p.recvForward(rank.manager());
            assertEquals(2f, b.toFloatArray()[0]);
            return concat(a.getShape().getShape(), b.getShape().getShape());
        });
        assertArrayEquals(new long[] {5, 2, 4, 1, 2, 4}, shapes.get(1));
    }

    @Test
    void wrongActivationShapeIsRefusedWithTheStage() {
        InJvmWorld.run(1, rank -> {
            P2pCommunication p2p = new P2pCommunication(rank.groups(ParallelDims.of(1, 1, 1)).pp(), SHAPE,
                    DataType.FLOAT32, false);
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> p2p.sendForward(filled(rank.manager(), new Shape(2, 2, 4), 0)));
            assertTrue(e.getMessage().contains("pipeline stage 0 of 1") && e.getMessage().contains("[2, 2, 4]")
                    && e.getMessage().contains("[3, 2, 4]"), e.getMessage());
            return null;
        });
    }

    private static float[] filled0(float base) {
        float[] v = new float[(int) SHAPE.size()];
        for (int i = 0; i < v.length; i++) {
            v[i] = base + i;
        }
        return v;
    }

    private static float[] concat(float[] a, float[] b) {
        float[] out = new float[a.length + b.length];
        System.arraycopy(a, 0, out, 0, a.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }

    private static long[] concat(long[] a, long[] b) {
        long[] out = new long[a.length + b.length];
        System.arraycopy(a, 0, out, 0, a.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }
}
