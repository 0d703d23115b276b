package io.mcore4j.core;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Cast;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.SplittableRandom;

import org.junit.jupiter.api.Test;

/**
 * bfloat16 tensors through {@link DataTypes}, against a Java reference of the format (the upper 16
 * bits of a float32, rounded to nearest even). Every call here would end the JVM if it reached DJL's
 * dtype mapping with bfloat16.
 */
class DataTypesTest {
    private static final float[] VALUES = {1.5f, -2.25f, 0.1f, 1000.37f, 1e-3f, -0f, 3.0e38f, 1e-40f};

    /** Round to nearest even, as libtorch (c10::BFloat16) does for finite values. */
    static short bf16Bits(float f) {
        int bits = Float.floatToRawIntBits(f);
        int rounding = 0x7FFF + ((bits >>> 16) & 1);
        return (short) ((bits + rounding) >>> 16);
    }

    static float bf16Value(float f) {
        return Float.intBitsToFloat((bf16Bits(f) & 0xFFFF) << 16);
    }

    @Test
    void convertsToBFloat16RoundingToNearestEvenAndBackExactly() {
        try (NDManager m = Mcore4j.newRootManager()) {
            NDArray x = m.create(VALUES);
            NDArray b = DataTypes.toType(x, DataType.BFLOAT16, false);
            assertEquals(DataType.UNKNOWN, b.getDataType(), "DJL itself cannot name bfloat16");
            assertEquals(DataType.BFLOAT16, DataTypes.of(b));
            assertTrue(DataTypes.isBFloat16(b));
            assertFalse(DataTypes.isBFloat16(x));
            float[] want = new float[VALUES.length];
            for (int i = 0; i < want.length; i++) {
                want[i] = bf16Value(VALUES[i]);
            }
            assertArrayEquals(want, DataTypes.toType(b, DataType.FLOAT32, false).toFloatArray(), 0f);
            assertArrayEquals(new double[] {1.5, -2.25}, DataTypes.toType(b, DataType.FLOAT64, false).get("0:2").toDoubleArray(), 0);
            assertSame(b, DataTypes.toType(b, DataType.BFLOAT16, false));
            NDArray copy = DataTypes.toType(b, DataType.BFLOAT16, true);
            assertEquals(DataType.BFLOAT16, DataTypes.of(copy));
            assertArrayEquals(DataTypes.toBytes(b), DataTypes.toBytes(copy));
        }
    }

    /** The answer kept for a bfloat16 tensor object is its own: asked again it agrees, and others are asked anew. */
    @Test
    void aBFloat16TensorAskedAgainAnswersTheSame() {
        try (NDManager m = Mcore4j.newRootManager()) {
            for (int i = 0; i < 64; i++) {
                NDArray x = m.create(VALUES);
                NDArray b = DataTypes.toType(x, DataType.BFLOAT16, false);
                NDArray h = DataTypes.toType(x, DataType.FLOAT16, false);
                for (int again = 0; again < 3; again++) {
                    assertEquals(DataType.BFLOAT16, DataTypes.of(b));
                    assertEquals(DataType.FLOAT16, DataTypes.of(h));
                    assertEquals(DataType.FLOAT32, DataTypes.of(x));
                }
                b.close();
                h.close();
                x.close();
            }
        }
    }

    @Test
    void bytesRoundTripBitForBit() {
        SplittableRandom random = new SplittableRandom(7);
        int n = 4096;
        ByteBuffer bits = ByteBuffer.allocate(2 * n).order(ByteOrder.LITTLE_ENDIAN);
        for (int i = 0; i < n; i++) {
            short s;
            do {
                s = (short) random.nextInt(1 << 16);
            } while ((s & 0x7F80) == 0x7F80 && (s & 0x007F) != 0); // every pattern but NaNs
            bits.putShort(s);
        }
        bits.flip();
        try (NDManager m = Mcore4j.newRootManager()) {
            NDArray b = DataTypes.fromBytes(m, bits.duplicate(), new Shape(64, 64), DataType.BFLOAT16, Device.cpu());
            assertEquals(DataType.BFLOAT16, DataTypes.of(b));
            assertEquals(new Shape(64, 64), b.getShape());
            assertArrayEquals(bits.array(), DataTypes.toBytes(b));
            // the same bytes as libtorch's own storage of the tensor
            assertArrayEquals(bits.array(), b.toByteArray());
            // and as a float32 tensor widened from them
            float[] widened = DataTypes.toType(b, DataType.FLOAT32, false).toFloatArray();
            for (int i = 0; i < n; i++) {
                assertEquals(Float.intBitsToFloat((bits.getShort(2 * i) & 0xFFFF) << 16), widened[i], 0f);
            }
            NDArray f = DataTypes.fromBytes(m, ByteBuffer.wrap(DataTypes.toBytes(m.create(VALUES))), new Shape(VALUES.length),
                    DataType.FLOAT32, Device.cpu());
            assertArrayEquals(VALUES, f.toFloatArray(), 0f);
        }
    }

    @Test
    void createsBFloat16Tensors() {
        try (NDManager m = Mcore4j.newRootManager()) {
            NDArray z = DataTypes.zeros(m, new Shape(2, 3), DataType.BFLOAT16);
            NDArray o = DataTypes.ones(m, new Shape(2, 3), DataType.BFLOAT16, Device.cpu());
            NDArray f = DataTypes.full(m, new Shape(3), 0.1, DataType.BFLOAT16, Device.cpu());
            for (NDArray t : new NDArray[] {z, o, f}) {
                assertEquals(DataType.BFLOAT16, DataTypes.of(t));
                assertSame(m, t.getManager());
            }
            assertEquals(0, DataTypes.toType(z, DataType.FLOAT32, false).sum().getFloat());
            assertEquals(6, DataTypes.toType(o, DataType.FLOAT32, false).sum().getFloat());
            assertArrayEquals(new float[] {bf16Value(0.1f), bf16Value(0.1f), bf16Value(0.1f)},
                    DataTypes.toType(f, DataType.FLOAT32, false).toFloatArray(), 0f);
            NDArray e = DataTypes.empty(m, new Shape(4, 5), DataType.BFLOAT16, Device.cpu());
            assertEquals(DataType.BFLOAT16, DataTypes.of(e));
            assertEquals(new Shape(4, 5), e.getShape());
            assertEquals(new Shape(), DataTypes.empty(m, new Shape(), DataType.BFLOAT16, Device.cpu()).getShape());
            NDArray moved = DataTypes.toDevice(f, Device.cpu(), true);
            assertEquals(DataType.BFLOAT16, DataTypes.of(moved));
            assertArrayEquals(DataTypes.toBytes(f), DataTypes.toBytes(moved));
            // a 0-dim operand for a bfloat16 tensor keeps it bfloat16
            NDArray half = f.mul(Tensors.scalar(0.5, f, m));
            assertEquals(DataType.BFLOAT16, DataTypes.of(half));
        }
    }

    @Test
    void refusesWhatDjlCannotCreateWithAnException() {
        try (NDManager m = Mcore4j.newRootManager()) {
            NDArray x = m.create(new float[] {1, 2});
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> DataTypes.toType(x, DataType.INT16, false));
            assertTrue(e.getMessage().contains("int16"), e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> DataTypes.zeros(m, new Shape(1), DataType.UINT64));
            assertThrows(IllegalArgumentException.class, () -> DataTypes.requireCreatable(DataType.BFLOAT16, "create"));
            assertThrows(IllegalArgumentException.class,
                    () -> DataTypes.fromBytes(m, ByteBuffer.allocate(3), new Shape(2), DataType.BFLOAT16, Device.cpu()));
        }
    }

    /** Cast differentiates between float32 and bfloat16 in both directions; autograd runs through bfloat16 ops. */
    @Test
    void castAndAutogradThroughBFloat16() {
        try (NDManager m = Mcore4j.newRootManager()) {
            NDArray w = m.create(new float[] {0.5f, -1.25f, 2f});
            w.setRequiresGradient(true);
            try (AutogradScope scope = AutogradScope.open(m)) {
                NDArray w16 = Cast.apply(scope, w, DataType.BFLOAT16);
                assertEquals(DataType.BFLOAT16, DataTypes.of(w16));
                NDArray y = w16.mul(w16).mul(Tensors.scalar(3, w16, scope.manager()));
                NDArray loss = Cast.apply(scope, y, DataType.FLOAT32).sum();
                scope.backward(loss);
            }
            // d/dw 3 w^2 = 6 w, exact in bfloat16 for these values
            assertArrayEquals(new float[] {3f, -7.5f, 12f}, w.getGradient().toFloatArray(), 0f);
            assertEquals(DataType.FLOAT32, w.getGradient().getDataType());
        }
    }

    /** A bfloat16 leaf that requires grad accumulates a bfloat16 gradient; Tensors reads and zeroes it. */
    @Test
    void bfloat16LeafGradients() {
        try (NDManager m = Mcore4j.newRootManager()) {
            NDArray p = DataTypes.toType(m.create(new float[] {1, 2, 3}), DataType.BFLOAT16, false);
            p.setRequiresGradient(true);
            assertTrue(Tensors.requiresGrad(p));
            NDArray none = Tensors.gradientOrZeros(p, m);
            assertEquals(DataType.BFLOAT16, DataTypes.of(none));
            try (AutogradScope scope = AutogradScope.open(m)) {
                scope.backward(Cast.apply(scope, p.mul(p), DataType.FLOAT32).sum());
            }
            NDArray g = Tensors.gradientOrNull(p, m);
            assertEquals(DataType.BFLOAT16, DataTypes.of(g));
            assertArrayEquals(new float[] {2, 4, 6}, DataTypes.toType(g, DataType.FLOAT32, false).toFloatArray(), 0f);
            Tensors.zeroGradient(p);
            assertEquals(0, DataTypes.toType(Tensors.gradientOrNull(p, m), DataType.FLOAT32, false).abs().sum().getFloat());
        }
    }
}
