package io.mcore4j.cuda;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.testing.NativeArrays;

import org.bytedeco.javacpp.FloatPointer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Addresses of CPU tensors, where they can be checked by reading the memory they point at (on the
 * GPU that memory is never read from Java). The same DJL entry points serve CUDA tensors.
 */
class DevicePointersTest {
    private static NDManager root;

    @BeforeAll
    static void open() {
        root = Mcore4j.newRootManager();
    }

    @AfterAll
    static void close() {
        root.close();
    }

    private static float[] read(long address, int count) {
        float[] out = new float[count];
        new FloatPointer(DevicePointers.pointer(address)).get(out);
        return out;
    }

    @Test
    void addressPointsAtTheDataAndViewsAddTheirOffset() {
        try (NDManager m = root.newSubManager()) {
            NDArray x = m.arange(0f, 12f, 1f).reshape(4, 3);
            long base = DevicePointers.address(x);
            assertNotEquals(0, base);
            assertArrayEquals(x.toFloatArray(), read(base, 12), 0f);
            NDArray rows = x.get("1:3");
            assertTrue(TensorMemory.isContiguous(rows));
            assertEquals(base + 3 * 4, DevicePointers.address(rows), "rows 1..2 start 3 floats in");
            assertArrayEquals(new float[] {3, 4, 5, 6, 7, 8}, read(DevicePointers.address(rows), 6), 0f);
            assertEquals(24, DevicePointers.bytes(rows));
            assertEquals(0, DevicePointers.address(m.zeros(new Shape(0, 3))), "no elements, no address");
        }
    }

    @Test
    void tensorsOverTheDirectLimitUseAViewOfTheirFirstElement() {
        try (NDManager m = root.newSubManager()) {
            NDArray x = m.arange(0f, 40f, 1f).reshape(5, 8);
            long direct = DevicePointers.address(x);
            int before = NativeArrays.live(m);
            assertEquals(direct, DevicePointers.address(x, 16), "a 160-byte tensor over a 16-byte limit");
            assertEquals(DevicePointers.address(x.get("2:4")), DevicePointers.address(x.get("2:4"), 4));
            assertEquals(before + 2, NativeArrays.live(m), "only the two slices made here stay; the views are released");
        }
    }

    @Test
    void nonContiguousTensorsAreCopiedAndRefused() {
        try (NDManager m = root.newSubManager()) {
            NDArray x = m.arange(0f, 6f, 1f).reshape(2, 3);
            assertSame(x, TensorMemory.contiguous(x, m), "a contiguous tensor is used as it is");
            NDArray t = x.transpose();
            assertFalse(TensorMemory.isContiguous(t));
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> DevicePointers.address(t));
            assertTrue(e.getMessage().contains("not contiguous"), e.getMessage());
            try (NDManager temp = m.newSubManager()) {
                NDArray c = TensorMemory.contiguous(t, temp);
                assertTrue(TensorMemory.isContiguous(c));
                assertEquals(new Shape(3, 2), c.getShape());
                assertEquals(DataType.FLOAT32, c.getDataType());
                assertArrayEquals(new float[] {0, 3, 1, 4, 2, 5}, read(DevicePointers.address(c), 6), 0f);
                assertSame(temp, c.getManager(), "the copy belongs to the manager passed in");
            }
            // a strided 1-d column
            NDArray column = x.get(":, 1");
            assertFalse(TensorMemory.isContiguous(column));
            assertArrayEquals(new float[] {1, 4}, TensorMemory.contiguous(column, m).toFloatArray(), 0f);
        }
    }
}
