package io.mcore4j.models.transformer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.fp8.Fp8Config;
import io.mcore4j.core.fp8.Fp8Format;
import io.mcore4j.core.fp8.Fp8Scaling;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.parallel.ParallelDims;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

/**
 * The layer spec's FP8 linears (issue 35): QKV, projection, FC1 and FC2 of every FP8 layer register on the one
 * scaling state, the layers {@code --first-last-layers-bf16} keeps out do not, and FP8 needs 16-bit parameters.
 */
class Fp8LayerSpecTest {
    private static TransformerConfig.Builder config(int layers) {
        return TransformerConfig.builder(layers, 32, 2, 64).maxSequenceLength(16).dropout(0, 0).dtype(DataType.BFLOAT16);
    }

    @Test
    void fp8LayersRegisterTheirFourLinearsAndTheFirstAndLastStayOut() {
        InJvmWorld.run(1, rank -> {
            Fp8Config fp8 = Fp8Config.of(Fp8Format.HYBRID).withBf16Layers(1, 1);
            TransformerConfig c = config(4).fp8(fp8).build();
            try (NDManager m = rank.manager().newSubManager(); Fp8Scaling scaling = new Fp8Scaling(fp8, m)) {
                GptModel model = GptModel.build(ModelContext.create(c, rank.groups(ParallelDims.of(1, 1, 1)), m,
                        new SeedScheme(3)), LayerSpec.tensorParallel().withFp8(scaling), new int[] {0, 1, 2, 3}, true, true);
                List<String> want = new ArrayList<>();
                for (int layer : new int[] {1, 2}) {
                    for (String linear : List.of("self_attention.linear_qkv.", "self_attention.linear_proj.",
                            "mlp.linear_fc1.", "mlp.linear_fc2.")) {
                        for (String role : List.of("input", "weight", "grad_output")) {
                            want.add("decoder.layers." + layer + "." + linear + role);
                        }
                    }
                }
                assertEquals(want, scaling.slotNames());
                model.close();
            }
            return null;
        });
    }

    @Test
    void fp8NeedsSixteenBitParametersAndLeavesALayerInFp8() {
        IllegalArgumentException fp32 = assertThrows(IllegalArgumentException.class,
                () -> config(4).dtype(DataType.FLOAT32).fp8(Fp8Config.of(Fp8Format.E4M3)).build());
        assertTrue(fp32.getMessage().contains("--bf16 or --fp16"), fp32.getMessage());
        IllegalArgumentException none = assertThrows(IllegalArgumentException.class,
                () -> config(2).fp8(Fp8Config.of(Fp8Format.E4M3).withBf16Layers(1, 1)).build());
        assertTrue(none.getMessage().contains("leave none of the 2 layers in FP8"), none.getMessage());
    }
}
