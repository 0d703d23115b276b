package io.mcore4j.parallel.nccl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.testing.NativeArrays;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The rank-major conversions checked on CPU against DJL's own concatenation and chunking: what NCCL
 * does to the flat buffers in between is simulated by concatenating the ranks' flat pieces.
 */
class RankMajorLayoutTest {
    private static NDManager root;

    @BeforeAll
    static void open() {
        root = Mcore4j.newRootManager();
    }

    @AfterAll
    static void close() {
        root.close();
    }

    private static NDArray piece(NDManager m, int rank, Shape shape) {
        // distinct values per rank and position
        return m.arange(0f, (float) shape.size(), 1f).add(1000f * rank).reshape(shape);
    }

    @Test
    void shapesAndPermutations() {
        Shape piece = new Shape(2, 3, 5);
        assertEquals(new Shape(4, 2, 3, 5), RankMajorLayout.gatherBuffer(piece, 4));
        assertEquals(new Shape(2, 12, 5), RankMajorLayout.gathered(piece, 1, 4));
        assertArrayEquals(new int[] {0, 1, 2, 3}, RankMajorLayout.gatherPermutation(3, 0));
        assertArrayEquals(new int[] {1, 0, 2, 3}, RankMajorLayout.gatherPermutation(3, 1));
        assertArrayEquals(new int[] {1, 2, 0, 3}, RankMajorLayout.gatherPermutation(3, 2));
        Shape input = new Shape(2, 6, 5);
        assertEquals(new Shape(2, 2, 5), RankMajorLayout.scattered(input, 1, 3));
        assertEquals(new Shape(2, 3, 2, 5), RankMajorLayout.scatterSplit(input, 1, 3));
        assertArrayEquals(new int[] {1, 0, 2, 3}, RankMajorLayout.scatterPermutation(3, 1));
        assertArrayEquals(new int[] {2, 0, 1, 3}, RankMajorLayout.scatterPermutation(3, 2));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> RankMajorLayout.scattered(input, 2, 3));
        assertTrue(e.getMessage().contains("dim 2 of shape (2, 6, 5) is not divisible by the group size 3"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> RankMajorLayout.gathered(piece, 3, 2));
    }

    @Test
    void gatherBufferBecomesTheConcatenationAlongEveryDim() {
        Shape[] shapes = {new Shape(4), new Shape(2, 3), new Shape(2, 3, 4), new Shape(1, 3, 1)};
        for (Shape shape : shapes) {
            for (int size : new int[] {1, 2, 3}) {
                for (int dim = 0; dim < shape.dimension(); dim++) {
                    try (NDManager m = root.newSubManager()) {
                        NDList pieces = new NDList();
                        NDList flat = new NDList();
                        for (int r = 0; r < size; r++) {
                            NDArray p = piece(m, r, shape);
                            pieces.add(p);
                            flat.add(p.reshape(-1));
                        }
                        // NCCL's all-gather writes rank r's flat piece at [r n, (r + 1) n)
                        NDArray buffer = NDArrays.concat(flat, 0).reshape(RankMajorLayout.gatherBuffer(shape, size));
                        NDArray got = RankMajorLayout.fromGatherBuffer(buffer, shape, dim, size, m);
                        NDArray expected = NDArrays.concat(pieces, dim);
                        assertEquals(expected.getShape(), got.getShape(), shape + " dim " + dim);
                        assertArrayEquals(expected.toFloatArray(), got.toFloatArray(), 0f, shape + " size " + size + " dim " + dim);
                    }
                }
            }
        }
    }

    @Test
    void scatterBufferPutsChunkRAtBlockR() {
        Shape[] shapes = {new Shape(2, 6), new Shape(3, 6, 2), new Shape(1, 4, 1), new Shape(2, 2, 6)};
        for (Shape shape : shapes) {
            for (int size : new int[] {1, 2}) {
                for (int dim = 1; dim < shape.dimension(); dim++) {
                    if (shape.get(dim) % size != 0) {
                        continue;
                    }
                    try (NDManager m = root.newSubManager()) {
                        NDArray input = piece(m, 1, shape);
                        NDArray buffer = RankMajorLayout.toScatterBuffer(input, dim, size, m);
                        assertTrue(TensorMemory.isContiguous(buffer), "NCCL needs a contiguous buffer");
                        float[] all = buffer.toFloatArray();
                        Shape chunkShape = RankMajorLayout.scattered(shape, dim, size);
                        int n = (int) chunkShape.size();
                        for (int r = 0; r < size; r++) {
                            NDArray chunk = Tensors.chunk(input, dim, size, r);
                            float[] block = java.util.Arrays.copyOfRange(all, r * n, (r + 1) * n);
                            assertArrayEquals(chunk.toFloatArray(), block, 0f, shape + " dim " + dim + " rank " + r);
                        }
                    }
                }
            }
        }
    }

    @Test
    void conversionsReleaseTheirIntermediates() {
        try (NDManager m = root.newSubManager()) {
            NDArray buffer = m.zeros(new Shape(2, 3, 4), DataType.FLOAT32);
            NDArray input = m.zeros(new Shape(3, 4), DataType.FLOAT32);
            int before = NativeArrays.live(m);
            for (int i = 0; i < 5; i++) {
                try (NDManager step = m.newSubManager()) {
                    RankMajorLayout.fromGatherBuffer(buffer, new Shape(3, 4), 1, 2, step);
                    RankMajorLayout.toScatterBuffer(input, 1, 2, step);
                }
            }
            assertEquals(before, NativeArrays.live(m));
            try (NDManager step = m.newSubManager()) {
                RankMajorLayout.fromGatherBuffer(buffer, new Shape(3, 4), 1, 2, step);
                RankMajorLayout.toScatterBuffer(input, 1, 2, step);
                assertEquals(2, NativeArrays.live(step), "only the two results stay, owned by the given manager");
            }
        }
    }
}
