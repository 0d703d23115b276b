package io.mcore4j.core;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;

import org.junit.jupiter.api.Test;

/**
 * {@link Tensors#fromHost} and the module behind its GPU path. This machine has no GPU: the module is
 * run on its CPU branch, which checks that the archive loads and that the call's arguments and result
 * travel as intended; {@code scripts/make_pinned_copy_module.py} checks the CUDA branch where CUDA exists.
 */
class PinnedCopyTest {

    @Test
    void fromHostGivesTheValuesInTheirShapeOwnedByTheManager() {
        try (NDManager m = Mcore4j.newRootManager(); NDManager owner = m.newSubManager()) {
            int[] data = {3, -1, 4, 1, -5, 9};
            NDArray t = Tensors.fromHost(data, new Shape(2, 3), owner);
            data[0] = 7; // the caller may reuse its array at once
            assertEquals(DataType.INT32, t.getDataType());
            assertEquals(new Shape(2, 3), t.getShape());
            assertArrayEquals(new int[] {3, -1, 4, 1, -5, 9}, t.toIntArray());
            assertSame(owner, t.getManager());
        }
    }

    @Test
    void fromHostRefusesAShapeOfAnotherSize() {
        try (NDManager m = Mcore4j.newRootManager()) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> Tensors.fromHost(new int[5], new Shape(2, 3), m));
            assertEquals("shape [2, 3] holds 6 elements, got 5 values", e.getMessage());
        }
    }

    @Test
    void theModuleCopiesAHostTensorToTheOwnersDevice() {
        try (NDManager m = Mcore4j.newRootManager(); NDManager owner = m.newSubManager(); NDManager host = m.newSubManager()) {
            NDArray x = host.create(new int[] {1, 2, 3, 4, 5, 6, 7, 8}, new Shape(2, 4));
            NDArray y = PinnedCopy.get().toDevice(x, owner);
            assertNotSame(x, y);
            assertSame(owner, y.getManager());
            assertEquals(x.getDevice(), y.getDevice());
            assertEquals(new Shape(2, 4), y.getShape());
            x.set(new ai.djl.ndarray.index.NDIndex("0, 0"), 100); // a copy: the source's later values do not reach it
            assertArrayEquals(new int[] {1, 2, 3, 4, 5, 6, 7, 8}, y.toIntArray());
        }
    }
}
