package io.mcore4j.planner;

import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDManager;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.MoeLayerPattern;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.tensorparallel.MlpActivation;
import io.mcore4j.models.TransformerConfig.Recompute;
import io.mcore4j.models.transformer.AttentionBackend;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.moe.MoeConfig;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.training.gpt.GptTrainingModel;

import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * The inventory the memory model counts is what the model builds: every rank of several layouts
 * builds its real chunks and the elements of its parameters (dense and expert apart) must equal the
 * inventory's, so a change to a layer's shapes fails here until the inventory follows.
 */
class ParameterInventoryTest {

    private static void check(TransformerConfig model, Layout layout) {
        Workload w = ReadmeFigures.workload(model, model.maxSequenceLength(), 1, 1, layout.dataParallel(), true);
        TransformerConfig c = w.modelFor(layout);
        List<long[]> built = InJvmWorld.run(layout.worldSize(), rank -> {
            ProcessGroups groups = rank.groups(layout.dims());
            try (NDManager params = rank.manager().newSubManager();
                 GptTrainingModel m = GptTrainingModel.build(ModelContext.create(c, groups, params, new SeedScheme(7)),
                         AttentionBackend.AUTO.layerSpec(c), layout.virtualStages())) {
                long dense = 0;
                long expert = 0;
                for (Parameter p : m.parameters()) {
                    if (p.kind() == Parameter.Kind.EXPERT) {
                        expert += p.data().size();
                    } else {
                        dense += p.data().size();
                    }
                }
                return new long[] {groups.pipelineRank(), dense, expert};
            }
        });
        for (int r = 0; r < built.size(); r++) {
            long[] b = built.get(r);
            List<ParameterInventory.Tensor> inventory = ParameterInventory.stage(c, layout, (int) b[0]);
            assertEquals(ParameterInventory.numel(inventory, false), b[1], "dense elements of rank " + r + " at " + layout.name());
            assertEquals(ParameterInventory.numel(inventory, true), b[2], "expert elements of rank " + r + " at " + layout.name());
        }
    }

    @Test
    void gptWithLearnedPositionsAndTiedEmbeddingsAtTp2Pp2() {
        TransformerConfig model = TransformerConfig.builder(4, 64, 4, 250).maxSequenceLength(32).dropout(0, 0).build();
        check(model, new Layout(2, 2, 1, 1, 1, 1, 1, Recompute.NONE, false));
    }

    @Test
    void llamaShapeWithGqaSwigluRopeUntiedAtTp2Pp2Vp2() {
        TransformerConfig model = TransformerConfig.builder(8, 64, 8, 300).queryGroups(2).ffnHiddenSize(96)
                .maxSequenceLength(32).normalization(TransformerConfig.Normalization.RMS_NORM, 1e-5)
                .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE).activation(MlpActivation.SWIGLU)
                .addBiasLinear(false).tiedEmbeddings(false).dropout(0, 0).build();
        check(model, new Layout(2, 2, 2, 1, 1, 1, 1, Recompute.NONE, false));
    }

    /** Gemma 3's shape: query and key norms, norms after the attention and the MLP, GeGLU, a head of its own. */
    @Test
    void gemmaShapeWithQueryKeyAndPostNormsAtTp2Pp2() {
        TransformerConfig model = TransformerConfig.builder(2, 64, 4, 256).queryGroups(2).kvChannels(24).ffnHiddenSize(96)
                .maxSequenceLength(32).normalization(TransformerConfig.Normalization.RMS_NORM, 1e-6)
                .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE).activation(MlpActivation.GEGLU_TANH)
                .addBiasLinear(false).qkLayernorm(true).postLayernorms(true, true).layernormZeroCenteredGamma(true)
                .dropout(0, 0).build();
        check(model, new Layout(2, 2, 1, 1, 1, 1, 1, Recompute.NONE, false));
    }

    @Test
    void qkvBiasWithoutOtherBiasesAtTp2Dp2() {
        TransformerConfig model = TransformerConfig.builder(2, 64, 4, 256).maxSequenceLength(32).addBiasLinear(false)
                .addQkvBias(true).dropout(0, 0).build();
        check(model, new Layout(2, 1, 1, 2, 1, 1, 1, Recompute.NONE, false));
    }

    @Test
    void mixtureOfExpertsEveryOtherLayerAtEp2() {
        TransformerConfig model = TransformerConfig.builder(4, 32, 4, 128).maxSequenceLength(16).dropout(0, 0)
                .moe(TransformerConfig.MoeSettings.of(4, 2, MoeLayerPattern.every(2), 48, 0.01,
                        MoeConfig.Dispatcher.ALL_TO_ALL)).build();
        check(model, new Layout(1, 1, 1, 2, 1, 2, 1, Recompute.NONE, false));
    }

    @Test
    void sharedExpertsAndAListOfMoeLayersAtTp2Ep2() {
        TransformerConfig model = TransformerConfig.builder(4, 32, 4, 128).maxSequenceLength(16).dropout(0, 0)
                .activation(MlpActivation.SWIGLU)
                .moe(new TransformerConfig.MoeSettings(MoeLayerPattern.parse("[0,1,1,0]"), MoeConfig.builder(4, 2, 48)
                        .sharedExpertFfnHiddenSize(32).dispatcher(MoeConfig.Dispatcher.ALL_TO_ALL).build()))
                .build();
        check(model, new Layout(2, 1, 1, 2, 1, 2, 1, Recompute.NONE, false));
    }

    /** DeepSeek-V3's shape: multi-latent attention (with and without a query latent), a dense layer, then experts. */
    @Test
    void multiLatentAttentionWithExpertsAtTp2Pp2() {
        for (int qLoraRank : new int[] {16, 0}) {
            TransformerConfig model = TransformerConfig.builder(4, 32, 4, 128).maxSequenceLength(16).dropout(0, 0)
                    .normalization(TransformerConfig.Normalization.RMS_NORM, 1e-6)
                    .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE).activation(MlpActivation.SWIGLU)
                    .addBiasLinear(false).multiLatentAttention(new TransformerConfig.MlaDims(qLoraRank, 8, 8, 4, 6))
                    .moe(new TransformerConfig.MoeSettings(MoeLayerPattern.parse("[0,1,1,1]"), MoeConfig.builder(4, 2, 16)
                            .routerScore(MoeConfig.RouterScore.SIGMOID).auxLossFree(true).sharedExpertFfnHiddenSize(16)
                            .dispatcher(MoeConfig.Dispatcher.ALL_TO_ALL).build()))
                    .build();
            check(model, new Layout(2, 2, 1, 1, 1, 1, 1, Recompute.NONE, false));
        }
    }
}
