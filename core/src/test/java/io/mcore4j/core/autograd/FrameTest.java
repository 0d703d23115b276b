package io.mcore4j.core.autograd;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.testing.NativeArrays;

import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** {@link Frame}: a block's dead tensors go when it ends; results and what functions refer to stay; gradients do not change. */
class FrameTest {
    private static NDManager root;

    @BeforeAll
    static void setUp() {
        root = Mcore4j.newRootManager();
    }

    @AfterAll
    static void tearDown() {
        root.close();
    }

    @Test
    void keepsOnlyTheResultOfABlock() {
        try (AutogradScope scope = AutogradScope.openNoGrad(root)) {
            NDArray x = scope.manager().create(new float[] {1, 2, 3});
            int before = NativeArrays.live(scope.manager());
            List<NDArray> inside = new ArrayList<>();
            NDArray y = scope.frame(x, in -> {
                NDArray a = in.add(in);       // lands in the frame: `in` is the frame's view of x
                NDArray b = a.exp();
                inside.add(a);
                inside.add(b);
                return b.log();
            });
            assertArrayEquals(new float[] {2, 4, 6}, y.toFloatArray(), 1e-5f);
            assertEquals(before + 1, NativeArrays.live(scope.manager()), "only the result is left");
            assertTrue(inside.stream().allMatch(NDArray::isReleased));
            assertFalse(x.isReleased(), "the caller's input stays");
            assertSame(scope.manager(), y.getManager(), "the result moved to the scope");
        }
    }

    /** An input is lent, not copied or viewed: no native call, and it returns to its manager open, whatever the block returned. */
    @Test
    void anInputIsLentToTheFrameAndReturned() {
        try (AutogradScope scope = AutogradScope.openNoGrad(root)) {
            NDManager callers = scope.manager().newSubManager();
            NDArray x = callers.create(new float[] {1, 2});
            NDArray same = scope.frame(x, in -> {
                assertSame(x, in, "the block gets the caller's tensor itself");
                assertSame(scope.manager(), in.getManager(), "lent to the frame while it runs");
                return in;
            });
            assertSame(x, same);
            assertSame(callers, x.getManager(), "back with its manager");
            assertFalse(x.isReleased());
            NDArray y = scope.frame(x, in -> scope.frame(in, inner -> inner.add(inner)));
            assertSame(callers, x.getManager(), "nested loans return in order");
            assertArrayEquals(new float[] {2, 4}, y.toFloatArray(), 0f);
            callers.close();
        }
    }

    @Test
    void framesNestAndTheInnerResultMovesOneLevelUp() {
        try (AutogradScope scope = AutogradScope.openNoGrad(root)) {
            NDArray x = scope.manager().create(new float[] {1, 2});
            NDManager[] inner = new NDManager[1];
            NDArray y = scope.frame(x, outerIn -> {
                NDManager outerManager = scope.manager();
                NDArray h = scope.frame(outerIn, in -> {
                    inner[0] = scope.manager();
                    return in.mul(in);
                });
                assertSame(outerManager, h.getManager(), "the inner result belongs to the outer frame");
                return h.add(h);
            });
            assertArrayEquals(new float[] {2, 8}, y.toFloatArray(), 0f);
            assertTrue(inner[0].getManagedArrays().isEmpty(), "the inner frame's manager is closed");
        }
    }

    @Test
    void gradientsThroughFramesAndRecordedFunctionsAreThoseWithoutFrames() {
        float[] plain = gradient(false);
        float[] framed = gradient(true);
        assertArrayEquals(plain, framed, 0f);
        assertArrayEquals(new float[] {4, 8, 12}, framed, 1e-6f, "d/dw sum((2w)^2) = 8w... through identity cuts");
    }

    /** d/dw of sum((w + w)²) with an identity Function applied inside the block (so the tape refers to frame tensors). */
    private static float[] gradient(boolean frames) {
        NDArray w = root.create(new float[] {0.5f, 1, 1.5f});
        w.setRequiresGradient(true);
        try (AutogradScope scope = AutogradScope.open(root)) {
            java.util.function.UnaryOperator<NDArray> block = in -> {
                NDArray doubled = in.add(in);
                NDArray cut = scope.apply1(new IdentityFunction(), doubled);
                return cut.mul(cut);
            };
            NDArray y = frames ? scope.frame(w, block) : block.apply(w);
            scope.backward(y.sum());
            return w.getGradient().toFloatArray();
        } finally {
            w.close();
        }
    }

    /**
     * An index over a Java buffer (what DJL's {@code create(long[])} makes on CPU) that autograd saves
     * must survive its frame: closing its handle would let the buffer be collected before backward reads it.
     */
    @Test
    void aTensorOverAJavaBufferOutlivesItsFrameUntilBackward() {
        NDArray w = root.create(new float[] {1, 2, 3, 4});
        w.setRequiresGradient(true);
        try (AutogradScope scope = AutogradScope.open(root)) {
            NDArray[] index = new NDArray[1];
            NDArray picked = scope.frame(w, in -> {
                index[0] = scope.manager().create(new long[] {3, 1, 3});
                return in.get(new ai.djl.ndarray.index.NDIndex("{}", index[0]));
            });
            assertTrue(io.mcore4j.core.TensorMemory.borrowsHostMemory(index[0]), "DJL made it over a Java buffer");
            assertFalse(index[0].isReleased(), "handed to the scope, not closed");
            assertEquals(0, scope.release(index[0]), "release leaves it open too");
            System.gc();
            scope.backward(picked.sum());
            assertArrayEquals(new float[] {0, 1, 0, 2}, w.getGradient().toFloatArray(), 0f);
        } finally {
            w.close();
        }
    }

    @Test
    void refusesBackwardInsideAFrameAndClosingOutOfOrder() {
        try (AutogradScope scope = AutogradScope.open(root)) {
            Frame outer = scope.openFrame();
            Frame inner = scope.openFrame();
            assertThrows(IllegalStateException.class, outer::close, "the inner frame is still open");
            assertThrows(IllegalStateException.class,
                    () -> scope.backward(scope.manager().ones(new ai.djl.ndarray.types.Shape(1))));
            inner.close();
            outer.close();
        }
    }
}
