package io.mcore4j.models.gpt;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.fp8.Fp8Config;
import io.mcore4j.core.fp8.Fp8Format;
import io.mcore4j.core.fp8.Fp8Scaling;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.optimizer.DistributedDataParallel;
import io.mcore4j.optimizer.MegatronOptimizer;
import io.mcore4j.optimizer.OptimizerConfig;
import io.mcore4j.optimizer.Optimizers;
import io.mcore4j.optimizer.ParameterLayout;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.pipeline.ScheduleConfig;
import io.mcore4j.pipeline.ScheduleResult;
import io.mcore4j.pipeline.Schedules;

import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.junit.jupiter.api.Test;

/**
 * A whole GPT whose layers take their second half as one Function with a written-out backward
 * ({@code MlpHalf}, built where the device has a {@link io.mcore4j.core.kernel.BiasGradientKernel}:
 * here {@link ReferenceBiasGradients}) against the same model built from the same seed with the
 * composed half, trained two steps of two micro-batches each through the schedule, the DDP wrapper
 * and SGD. Per step the micro-batches' losses, every parameter's accumulated gradient after the
 * step's backward passes and every weight after the optimizer step must agree. This exercises what
 * {@code MlpHalfTest} cannot: which parameters the layer hands the half (and in which order), the
 * aliases of the leaves that a first gradient is stolen through, the in-place accumulation of the
 * second micro-batch, the attention half's residual alias, and gradients set to none between steps
 * (the training loop's default) or zeroed in place. With {@code --fp8-format hybrid} the half multiplies through the
 * layer's FP8 linears: the same losses, gradients and weights as the composed half's FP8 linears (within bfloat16
 * rounding), and the same amax histories, which stay zero for fc1 and fc2 if the half multiplies in bfloat16.
 */
class MlpHalfTrainingTest {
    private static final int LAYERS = 2;
    private static final int SEQ = 8;
    private static final int MICRO_BATCH = 2;
    private static final int MICRO_BATCHES = 2;
    private static final int STEPS = 2;
    /** Largest difference allowed, relative to the largest magnitude of the compared tensor. */
    private static final double TOLERANCE = 1e-5;
    private static final String[] HALF_PARAMETERS = {"pre_mlp_layernorm.weight", "pre_mlp_layernorm.bias",
        "mlp.linear_fc1.weight", "mlp.linear_fc1.bias", "mlp.linear_fc2.weight", "mlp.linear_fc2.bias"};

    private static final TransformerConfig CONFIG = TransformerConfig.builder(LAYERS, 32, 4, 64)
            .maxSequenceLength(SEQ).dropout(0, 0).build();
    /**
     * SGD: an update proportional to the gradient keeps the weights as close as the gradients (Adam's
     * first step, {@code lr · g / (|g| + eps)}, turns float32 rounding in a gradient element near
     * {@code eps} into a difference of order {@code lr}).
     */
    private static final OptimizerConfig OPTIMIZER = OptimizerConfig.builder()
            .algorithm(OptimizerConfig.Algorithm.SGD).lr(0.1).build();
    /** The same with float32 master weights for bfloat16 parameters (FP8's runs). */
    private static final OptimizerConfig BF16_OPTIMIZER = OptimizerConfig.builder()
            .algorithm(OptimizerConfig.Algorithm.SGD).lr(0.1).bf16(true).build();

    /** FP8's runs: bfloat16 parameters, hybrid format, delayed scaling over two steps. */
    private static final TransformerConfig FP8_CONFIG = TransformerConfig.builder(LAYERS, 32, 4, 64)
            .maxSequenceLength(SEQ).dropout(0, 0).dtype(DataType.BFLOAT16).fp8(Fp8Config.of(Fp8Format.HYBRID)).build();
    /**
     * The two halves' LayerNorm and GELU round differently in bfloat16 (the reference kernels here compute in float32),
     * and a different bfloat16 input can round to a neighbouring float8 value, 6% (e4m3) or 12.5% (e5m2) away:
     * the whole model agrees only to that. {@code MlpHalfTest} compares the FP8 half itself tightly.
     */
    private static final double FP8_TOLERANCE = 0.15;

    @Test
    void mlpHalfTrainsAsComposedHalfWithGradientsSetToNone() {
        compare(true, false);
    }

    @Test
    void mlpHalfTrainsAsComposedHalfWithGradientsZeroedInPlace() {
        compare(false, false);
    }

    @Test
    void mlpHalfMultipliesThroughTheLayersFp8Linears() {
        compare(true, true);
    }

    /** What one run saw at each step, and the FP8 amax history at the end (null without FP8). */
    private record Run(List<float[]> losses, List<Map<String, double[]>> gradients, List<Map<String, double[]>> weights,
                       Map<String, double[]> amaxes) {}

    private static void compare(boolean setToNone, boolean fp8) {
        int gelu = ReferenceBiasGradients.GELU_BACKWARDS.get();
        int sums = ReferenceBiasGradients.COLUMN_SUMS.get();
        int norms = ReferenceBiasGradients.NORM_GRADIENTS.get();
        int normForwards = ReferenceBiasGradients.NORM_FORWARDS.get();
        Run composed = train(false, setToNone, fp8);
        assertEquals(gelu, ReferenceBiasGradients.GELU_BACKWARDS.get(), "the composed model ran the MLP half");
        Run half = train(true, setToNone, fp8);
        double tolerance = fp8 ? FP8_TOLERANCE : TOLERANCE;
        int passes = LAYERS * MICRO_BATCHES * STEPS;
        assertEquals(passes, ReferenceBiasGradients.GELU_BACKWARDS.get() - gelu, "MLP half backward passes (GELU)");
        assertEquals(passes, ReferenceBiasGradients.COLUMN_SUMS.get() - sums, "MLP half backward passes (fc2 bias)");
        assertEquals(passes, ReferenceBiasGradients.NORM_GRADIENTS.get() - norms, "MLP half backward passes (LayerNorm)");
        assertEquals(passes, ReferenceBiasGradients.NORM_FORWARDS.get() - normForwards, "MLP half forward passes (LayerNorm)");

        String mode = setToNone ? " (gradients set to none)" : " (gradients zeroed)";
        for (int step = 0; step < STEPS; step++) {
            float[] expected = composed.losses().get(step);
            float[] actual = half.losses().get(step);
            assertEquals(MICRO_BATCHES, expected.length);
            for (int mb = 0; mb < MICRO_BATCHES; mb++) {
                assertEquals(expected[mb], actual[mb], tolerance * Math.abs(expected[mb]),
                        "loss of step " + step + " micro-batch " + mb + mode);
            }
            assertAllClose(composed.gradients().get(step), half.gradients().get(step), tolerance, "gradient at step " + step + mode);
            assertAllClose(composed.weights().get(step), half.weights().get(step), tolerance, "weight after step " + step + mode);
        }
        if (fp8) {
            assertAllClose(composed.amaxes(), half.amaxes(), tolerance, "FP8 amax history");
            // input, weight and output gradient of fc1 and fc2 in every layer: each cast records its amax
            List<String> mlpSlots = half.amaxes().keySet().stream().filter(k -> k.contains(".mlp.linear_fc")).toList();
            assertEquals(LAYERS * 2 * 3, mlpSlots.size(), "the MLP linears' FP8 slots " + half.amaxes().keySet());
            for (String slot : mlpSlots) {
                assertTrue(maxAbs(half.amaxes().get(slot)) > 0, slot + ": no FP8 cast recorded an amax");
            }
        }
        // the half's parameters must have got a gradient at all (an empty comparison would pass)
        for (int layer = 0; layer < LAYERS; layer++) {
            for (String name : HALF_PARAMETERS) {
                String key = "decoder.layers." + layer + "." + name;
                double[] g = composed.gradients().get(STEPS - 1).get(key);
                assertTrue(g != null && maxAbs(g) > 0, key + " got no gradient");
            }
        }
    }

    /** Same keys, and each tensor within {@link #TOLERANCE} of its largest expected magnitude. */
    private static void assertAllClose(Map<String, double[]> expected, Map<String, double[]> actual, double tolerance,
                                       String what) {
        assertEquals(expected.keySet(), actual.keySet(), what + ": parameters");
        for (Map.Entry<String, double[]> e : expected.entrySet()) {
            double[] a = e.getValue();
            double[] b = actual.get(e.getKey());
            assertEquals(a.length, b.length, what + " " + e.getKey() + ": size");
            double scale = Math.max(maxAbs(a), 1e-12);
            double diff = 0;
            for (int i = 0; i < a.length; i++) {
                diff = Math.max(diff, Math.abs(a[i] - b[i]));
            }
            assertTrue(diff <= tolerance * scale, what + " " + e.getKey() + ": max |difference| " + diff
                    + " exceeds " + tolerance + " x " + scale);
        }
    }

    private static double maxAbs(double[] v) {
        double m = 0;
        for (double x : v) {
            m = Math.max(m, Math.abs(x));
        }
        return m;
    }

    /**
     * Builds the model (with the MLP half where {@code mlpHalf}: the layers look the kernel up when
     * they are built) and trains it {@link #STEPS} steps on one rank.
     */
    private static Run train(boolean mlpHalf, boolean setToNone, boolean fp8) {
        TransformerConfig config = fp8 ? FP8_CONFIG : CONFIG;
        return InJvmWorld.run(1, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(1, 1, 1));
            NDManager m = rank.manager();
            Fp8Scaling scaling = fp8 ? new Fp8Scaling(config.fp8(), m) : null;
            GptModel model = build(mlpHalf, ModelContext.create(config, groups, m, new SeedScheme(17)), scaling);
            Map<String, Parameter> named = model.namedParameters("");
            Map<Parameter, String> keys = new IdentityHashMap<>();
            named.forEach((key, p) -> keys.put(p, key));
            Run run = new Run(new ArrayList<>(), new ArrayList<>(), new ArrayList<>(), new TreeMap<>());
            OptimizerConfig optimizerConfig = fp8 ? BF16_OPTIMIZER : OPTIMIZER;
            try (DistributedDataParallel ddp = new DistributedDataParallel(model.parameters(), groups, optimizerConfig,
                    model.sharedEmbeddingParameters());
                 MegatronOptimizer optimizer = Optimizers.create(model.parameters(), ddp, groups, optimizerConfig,
                         ParameterLayout.byKey(keys::get))) {
                ScheduleConfig schedule = ScheduleConfig.of(MICRO_BATCHES, new Shape(SEQ, MICRO_BATCH, config.hiddenSize()),
                        config.dtype());
                for (int step = 0; step < STEPS; step++) {
                    int s = step;
                    ScheduleResult result = Schedules.forwardBackward((scope, chunk, mb, input) -> {
                        NDArray[] data = TokenBatches.shifted(scope.manager(), config.vocabSize(), SEQ, MICRO_BATCH,
                                3 + 2 * (s * MICRO_BATCHES + mb), 5 * s + mb);
                        return model.forward(scope, data[0], input, data[1]);
                    }, 1, groups, m, schedule);
                    run.losses().add(result.losses().clone());
                    run.gradients().add(read(named, true, m));
                    ddp.finishGradSync();
                    optimizer.step(OPTIMIZER.lr());
                    if (scaling != null) {
                        if (step == STEPS - 1) {
                            run.amaxes().putAll(amaxes(scaling, m)); // the last step's casts, before the update rolls them
                        }
                        scaling.update(x -> x); // one rank: nothing to reduce; the next step casts the new weights
                    }
                    ddp.zeroGrad(setToNone);
                    run.weights().add(read(named, false, m));
                }
            }
            if (scaling != null) {
                scaling.close();
            }
            return run;
        }).get(0);
    }

    /** Builds the model with {@link ReferenceBiasGradients} offered or not, restoring the property after. */
    private static GptModel build(boolean mlpHalf, ModelContext ctx, Fp8Scaling scaling) {
        String before = System.getProperty(ReferenceBiasGradients.PROPERTY);
        System.setProperty(ReferenceBiasGradients.PROPERTY, Boolean.toString(mlpHalf));
        try {
            LayerSpec spec = scaling == null ? LayerSpec.tensorParallel() : LayerSpec.tensorParallel().withFp8(scaling);
            return GptModel.build(ctx, spec, new int[] {0, 1}, true, true);
        } finally {
            if (before == null) {
                System.clearProperty(ReferenceBiasGradients.PROPERTY);
            } else {
                System.setProperty(ReferenceBiasGradients.PROPERTY, before);
            }
        }
    }

    /** Each slot's column of the amax history, as float64, by slot name. */
    private static Map<String, double[]> amaxes(Fp8Scaling scaling, NDManager m) {
        Map<String, double[]> values = new TreeMap<>();
        try (NDManager temp = m.newSubManager()) {
            NDArray history = Tensors.own(scaling.history().toType(DataType.FLOAT64, true), temp);
            List<String> names = scaling.slotNames();
            for (int i = 0; i < names.size(); i++) {
                values.put(names.get(i), Tensors.own(history.get(":, " + i), temp).toDoubleArray());
            }
        }
        return values;
    }

    /** Every parameter's gradient (zeros where it has none) or value, as float64, by key. */
    private static Map<String, double[]> read(Map<String, Parameter> named, boolean gradients, NDManager m) {
        Map<String, double[]> values = new TreeMap<>();
        try (NDManager temp = m.newSubManager()) {
            named.forEach((key, p) -> {
                NDArray t = gradients ? Tensors.gradientOrZeros(p.data(), temp) : p.data();
                values.put(key, Tensors.own(t.toType(DataType.FLOAT64, true), temp).toDoubleArray());
            });
        }
        return values;
    }
}
