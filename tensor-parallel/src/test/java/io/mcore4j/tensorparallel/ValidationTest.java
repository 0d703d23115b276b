package io.mcore4j.tensorparallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/** Invalid sizes and options are refused with messages that name the numbers. */
class ValidationTest {

    @Test
    void vocabularyPaddingRoundsUpToAMultipleOfDivisorTimesTensorParallel() {
        assertEquals(50304, Vocab.padded(50257, 128, 1));
        assertEquals(51200, Vocab.padded(50257, 128, 8)); // 50 x 1024
        assertEquals(256, Vocab.padded(256, 128, 2));
        assertEquals(8, Vocab.padded(5, 1, 8));
        assertEquals(6400, Vocab.perRank(51200, 8));
        assertMessage(() -> Vocab.perRank(50257, 4), "vocabulary size 50257", "tensor parallel size 4");
        assertThrows(IllegalArgumentException.class, () -> Vocab.padded(0, 128, 1));
        assertThrows(IllegalArgumentException.class, () -> Vocab.padded(10, 0, 1));
    }

    @Test
    void layersRefuseSizesThatTheTensorParallelSizeDoesNotDivide() {
        InJvmWorld.run(4, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(4, 4, 1)).tp();
            try (NDManager m = ctx.manager().newSubManager()) {
                assertMessage(() -> ColumnParallelLinear.builder(8, 30, tp).manager(m).build(),
                        "output size 30", "tensor parallel size 4");
                assertMessage(() -> RowParallelLinear.builder(30, 8, tp).manager(m).build(),
                        "input size 30", "tensor parallel size 4");
                assertMessage(() -> VocabParallelEmbedding.builder(50, 8, tp).manager(m).build(),
                        "vocabulary size 50", "tensor parallel size 4");
                assertMessage(() -> ColumnParallelLinear.builder(8, 24, tp).stride(4).manager(m).build(),
                        "stride 4", "partition size 6");
                assertMessage(() -> ColumnParallelLinear.builder(8, 16, tp).sequenceParallel(true).gatherOutput(true)
                        .manager(m).build(), "gatherOutput", "sequence parallel");
                assertMessage(() -> RowParallelLinear.builder(16, 8, tp).sequenceParallel(true).inputIsParallel(false)
                        .manager(m).build(), "inputIsParallel");
                assertThrows(IllegalStateException.class, () -> ColumnParallelLinear.builder(8, 16, tp).build());

                RowParallelLinear row = RowParallelLinear.builder(16, 8, tp).sequenceParallel(true).manager(m).build();
                VocabParallelEmbedding emb = VocabParallelEmbedding.builder(16, 8, tp).sequenceParallel(true).manager(m).build();
                ColumnParallelLinear col = ColumnParallelLinear.builder(8, 16, tp).manager(m).build();
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDArray x = scope.manager().ones(new Shape(6, 1, 4));
                    assertMessage(() -> row.forward(scope, x), "sequence length 6", "tensor parallel size 4");
                    NDArray ids = scope.manager().zeros(new Shape(6, 1), ai.djl.ndarray.types.DataType.INT64);
                    assertMessage(() -> emb.forward(scope, ids), "sequence length 6", "tensor parallel size 4");
                    assertMessage(() -> col.forward(scope, scope.manager().ones(new Shape(4, 1, 7))), "last dim 8");
                    assertMessage(() -> row.forward(scope, scope.manager().ones(new Shape(4, 1, 16))), "last dim 4");
                }
                row.close();
                emb.close();
                col.close();
            }
            return null;
        });
    }

    private static void assertMessage(Executable body, String... parts) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, body);
        for (String p : parts) {
            assertTrue(e.getMessage().contains(p), "message \"" + e.getMessage() + "\" should mention \"" + p + "\"");
        }
    }
}
