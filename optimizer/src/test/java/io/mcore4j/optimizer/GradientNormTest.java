package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** Global gradient norm and clipping at TP2 x PP2 x DP2 against the serial model (acceptance test 3). */
class GradientNormTest {
    private static final ParallelDims DIMS = ParallelDims.of(8, 2, 2);

    @Test
    void globalNormOfSynchronisedGradientsEqualsTheSerialNormAndClippingMatches() {
        double serial = SplitModel.serialNorm();
        double maxNorm = serial / 3;
        double coefficient = maxNorm / (serial + 1e-6);
        InJvmWorld.run(8, rank -> {
            ProcessGroups groups = rank.groups(DIMS);
            NDManager m = rank.manager();
            List<Parameter> params = SplitModel.build(groups, m);
            List<Parameter> shared = new ArrayList<>();
            for (Parameter p : params) {
                SplitModel.Spec spec = SplitModel.spec(p);
                SplitModel.addGradient(p, SplitModel.local(spec, SplitModel.gradient(spec), groups.tensorParallelRank()), m);
                if (spec.stage() == -1) {
                    shared.add(p);
                }
            }
            double norm = GradientNorm.global(params, shared, groups, m);
            assertEquals(serial, norm, 1e-6 * serial, "rank " + rank.rank());
            // without the tied-embedding rule the last stage's copy would count twice
            double withoutRule = GradientNorm.global(params, groups, m);
            assertTrue(withoutRule > serial * (1 + 1e-3), "the tied embedding must count once: " + withoutRule);

            double applied = GradientNorm.clip(params, maxNorm, norm, m);
            assertEquals(coefficient, applied, 1e-6);
            for (Parameter p : params) {
                SplitModel.Spec spec = SplitModel.spec(p);
                float[] expected = SplitModel.local(spec, SplitModel.gradient(spec), groups.tensorParallelRank());
                float[] actual = p.gradient(m).toFloatArray();
                for (int i = 0; i < expected.length; i++) {
                    assertEquals(expected[i] * coefficient, actual[i], 1e-6, p.name() + "[" + i + "]");
                }
            }
            params.forEach(Parameter::close);
            return null;
        });
    }

    /**
     * Raw per-rank gradients whose synchronisation gives the serial gradient: data-parallel ranks
     * differ by +-D, sequence-parallel halves differ by +-E over TP, and the tied embedding's
     * gradient is split between the stages. One SGD step with lr 1 must then move every weight by
     * exactly (clipped) -G, and report the serial norm.
     */
    @ParameterizedTest
    @CsvSource({"false, 0", "true, 0", "false, 0.5", "true, 0.5", "true, 0.2"})
    void optimizerSynchronisesClipsAndStepsLikeTheSerialModel(boolean distributed, double clipFraction) {
        double serial = SplitModel.serialNorm();
        double clip = clipFraction * serial;
        double coefficient = clip > 0 ? Math.min(1, clip / (serial + 1e-6)) : 1;
        OptimizerConfig config = OptimizerConfig.builder().algorithm(OptimizerConfig.Algorithm.SGD).sgdMomentum(0)
                .weightDecay(0).clipGrad(clip).useDistributedOptimizer(distributed)
                .bucketSizeBytes(clipFraction == 0.2 ? 40_000_000L : 64).build();
        InJvmWorld.run(8, rank -> {
            ProcessGroups groups = rank.groups(DIMS);
            NDManager m = rank.manager();
            List<Parameter> params = SplitModel.build(groups, m);
            List<Parameter> shared = params.stream().filter(p -> SplitModel.spec(p).stage() == -1).toList();
            DistributedDataParallel ddp = new DistributedDataParallel(params, groups, config, shared);
            MegatronOptimizer optimizer = Optimizers.create(params, ddp, groups, config);
            int tp = groups.tensorParallelRank();
            double dpSign = groups.dataParallelRank() == 0 ? 1 : -1;
            for (Parameter p : params) {
                SplitModel.Spec spec = SplitModel.spec(p);
                float[] g = SplitModel.gradient(spec);
                float[] d = SplitModel.serial(spec, 3);
                float[] e = SplitModel.serial(spec, 4);
                float[] raw;
                if (spec.stage() == -1) {
                    // first stage holds part A, last stage G - A
                    raw = groups.isFirstStage() ? e : SplitModel.plus(g, e, -1);
                } else if (spec.kind() == Parameter.Kind.SEQUENCE_PARALLEL) {
                    float[] half = SplitModel.plus(new float[g.length], g, 0.5);
                    raw = SplitModel.plus(half, e, tp == 0 ? 1 : -1);
                } else {
                    raw = g;
                }
                raw = SplitModel.plus(raw, d, dpSign);
                SplitModel.addGradient(p, SplitModel.local(spec, raw, tp), m);
            }
            ddp.finishGradSync();
            StepResult result = optimizer.step(1.0, 0.0);
            assertFalse(result.skipped());
            assertEquals(serial, result.gradNorm(), 1e-6 * serial, "rank " + rank.rank());
            for (Parameter p : params) {
                SplitModel.Spec spec = SplitModel.spec(p);
                float[] w = SplitModel.local(spec, SplitModel.weight(spec), tp);
                float[] g = SplitModel.local(spec, SplitModel.gradient(spec), tp);
                float[] actual = p.data().toFloatArray();
                for (int i = 0; i < w.length; i++) {
                    assertEquals(w[i] - coefficient * g[i], actual[i], 1e-6, "rank " + rank.rank() + " " + p.name() + "[" + i + "]");
                }
            }
            optimizer.close();
            ddp.close();
            params.forEach(Parameter::close);
            return null;
        });
    }

    /**
     * Scalars are added in float64 whether they share a dtype (stacked, then widened once) or not
     * (widened one by one): float32 addition would lose the 1 next to 1e8.
     */
    @Test
    void statisticsAreAddedInFloat64() {
        try (NDManager m = Mcore4j.newRootManager()) {
            List<NDArray> floats = List.of(m.create(1e8f), m.create(1f), m.create(-1e8f), m.create(0.5f));
            assertEquals(1.5, GradientNorm.sumOnDevice(floats, m).getDouble());
            List<NDArray> mixed = List.of(m.create(1e8f), m.create(3L), m.create(-1e8f), m.create(0.25));
            assertEquals(3.25, GradientNorm.sumOnDevice(mixed, m).getDouble());
        }
        // over the world: every rank's statistics, one all-reduce
        InJvmWorld.run(2, rank -> {
            NDManager m = rank.manager();
            ProcessGroups groups = rank.groups(ParallelDims.builder(2).build());
            double r = rank.rank();
            List<NDArray> squares = List.of(m.create(1e8f), m.create((float) (1 + r)), m.create(-1e8f));
            List<NDArray> zeros = List.of(m.create(2L + rank.rank()));
            double[] stats = GradientNorm.sumOverWorld(List.of(squares, List.of(), zeros), groups, m);
            assertArrayEquals(new double[] {3, 0, 5}, stats, "rank " + rank.rank());
            return null;
        });
    }
}
