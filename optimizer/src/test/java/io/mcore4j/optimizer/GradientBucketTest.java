package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.core.nn.Parameter;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Bucket planning at TP2 x PP2 x DP2 over {@link SplitModel} (2-D and 1-D, split and replicated,
 * sequence-parallel and tied parameters): every bucket is uniform in weight decay and in norm
 * counting, keeps the backward order within its group, and data-parallel peers (which must issue
 * the same collectives) plan the same buckets although only one of them counts replicas.
 */
class GradientBucketTest {

    /** One rank's plan: its model-parallel coordinates and one line per bucket. */
    private record Plan(int tp, int pp, int dp, List<String> buckets) {}

    @ParameterizedTest
    @CsvSource({"false, 64", "true, 64", "false, 40000000", "true, 40000000"})
    void bucketsAreUniformInDecayAndCountingAndAgreeAcrossDataParallelPeers(boolean distributed, long bucketBytes) {
        OptimizerConfig config = OptimizerConfig.builder().useDistributedOptimizer(distributed)
                .bucketSizeBytes(bucketBytes).build();
        List<Plan> plans = InJvmWorld.run(8, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(8, 2, 2));
            List<Parameter> params = SplitModel.build(groups, rank.manager());
            Set<Parameter> shared = Set.copyOf(params.stream().filter(p -> SplitModel.spec(p).stage() == -1).toList());
            List<GradientBucket> buckets = GradientBucket.plan(params, groups, config, shared::contains);
            List<String> lines = new ArrayList<>();
            Map<String, Integer> lastIndexOfGroup = new HashMap<>();
            int slots = 0;
            boolean anyDecays = false;
            boolean anyConstant = false;
            for (GradientBucket b : buckets) {
                StringBuilder line = new StringBuilder(b.decays + " " + b.countsInNorm + ":");
                for (GradientBucket.Slot slot : b.slots) {
                    Parameter p = slot.param();
                    assertEquals(UpdateRule.decays(p), b.decays, p.name() + " in " + b);
                    assertEquals(GradientNorm.counts(p, shared.contains(p), !distributed, groups), b.countsInNorm,
                            "rank " + rank.rank() + ": " + p.name() + " in " + b);
                    assertEquals(p.data().getDataType(), b.paramDtype);
                    // reverse order within a group of alike parameters, across its buckets too
                    String group = b.decays + "/" + GradientNorm.countsOnModelParallelRank(p, shared.contains(p), groups);
                    int index = params.indexOf(p);
                    Integer previous = lastIndexOfGroup.put(group, index);
                    assertTrue(previous == null || previous > index, p.name() + " comes after a later parameter");
                    line.append(' ').append(p.name()).append('@').append(slot.offset());
                    slots++;
                }
                anyDecays |= b.decays;
                anyConstant |= !b.decays;
                lines.add(line.toString());
            }
            assertEquals(params.size(), slots, "every parameter in exactly one bucket");
            assertTrue(anyDecays && anyConstant, "matrices and vectors both present: " + lines);
            Plan plan = new Plan(groups.tensorParallelRank(), groups.pipelineRank(), groups.dataParallelRank(), lines);
            params.forEach(Parameter::close);
            return plan;
        });
        for (Plan a : plans) {
            for (Plan b : plans) {
                if (a.tp() == b.tp() && a.pp() == b.pp()) {
                    assertEquals(a.buckets().stream().map(GradientBucketTest::layout).toList(),
                            b.buckets().stream().map(GradientBucketTest::layout).toList(),
                            "data-parallel peers at tp " + a.tp() + " pp " + a.pp() + " must plan the same buckets");
                }
            }
        }
        // without the distributed optimizer only data-parallel rank 0 counts the replicated gradients
        for (Plan p : plans) {
            boolean anyCounted = p.buckets().stream().anyMatch(line -> line.split(":")[0].endsWith("true"));
            if (!distributed && p.dp() == 1) {
                assertFalse(anyCounted, "data-parallel rank 1 counts nothing: " + p.buckets());
            }
            if (p.dp() == 0 || distributed) {
                assertTrue(anyCounted, "rank at tp " + p.tp() + " pp " + p.pp() + " counts something: " + p.buckets());
            }
        }
    }

    /** The parameters and offsets of a bucket line, without the flags that may differ between peers. */
    private static String layout(String line) {
        String[] parts = line.split(":", 2);
        return parts[0].split(" ")[0] + ":" + parts[1];
    }
}
