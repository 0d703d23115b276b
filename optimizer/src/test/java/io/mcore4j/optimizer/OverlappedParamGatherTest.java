package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.parallel.Backend;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.PendingCollective;
import io.mcore4j.parallel.ProcessGroup;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * {@link OptimizerConfig#overlapParamGather()}: the step starts the distributed optimizer's
 * all-gathers and a bucket's parameters change only when a forward asks for one of them
 * ({@link MegatronOptimizer#beforeForward}), in whatever order it asks, or at
 * {@link MegatronOptimizer#finishParamSync()} / close; training that asks before each forward reads
 * a parameter equals training without the overlap exactly.
 */
class OverlappedParamGatherTest {
    /** 48-byte buckets: three buckets for the MLP's four parameters. */
    private static final OptimizerConfig GATHERED = OptimizerConfig.builder().lr(1e-2).weightDecay(0.01).clipGrad(1.0)
            .useDistributedOptimizer(true).bucketSizeBytes(48).build();
    private static final OptimizerConfig OVERLAPPED = GATHERED.toBuilder().overlapParamGather(true).build();

    /** fc1.weight, fc1.bias, fc2.weight, fc2.bias after one step, on each of two ranks. */
    private static List<List<float[]>> oneStep(OptimizerConfig config) {
        return InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(2, 1, 1));
            TinyMlp model = new TinyMlp(rank.manager(), DataType.FLOAT32);
            DistributedDataParallel ddp = new DistributedDataParallel(model.params, groups, config, List.of());
            MegatronOptimizer optimizer = Optimizers.create(model.params, ddp, groups, config);
            step(model, ddp, optimizer, groups, 0, 1);
            optimizer.finishParamSync();
            List<float[]> values = model.values();
            optimizer.close();
            ddp.close();
            model.close();
            return values;
        });
    }

    @Test
    void aBucketIsWrittenOnlyWhenTheForwardAsksForOneOfItsParameters() {
        List<List<float[]>> reference = oneStep(GATHERED);
        List<float[]> initial = TinyMlp.initialValues();
        InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(2, 1, 1));
            TinyMlp model = new TinyMlp(rank.manager(), DataType.FLOAT32);
            DistributedDataParallel ddp = new DistributedDataParallel(model.params, groups, OVERLAPPED, List.of());
            // fc2.weight, fc1.weight, and both biases (a bias alone is under 48 bytes)
            assertEquals(3, ddp.bucketCount());
            MegatronOptimizer optimizer = Optimizers.create(model.params, ddp, groups, OVERLAPPED);
            step(model, ddp, optimizer, groups, 0, 1);
            List<float[]> expected = reference.get(rank.rank());
            for (int i = 0; i < 4; i++) {
                assertFalse(Arrays.equals(initial.get(i), expected.get(i)), "the step must move " + TinyMlp.NAMES.get(i));
            }
            // the step started every gather and wrote nothing
            assertValues(model, initial.toArray(float[][]::new));
            // the forward's last parameter first: the whole bucket of biases, the last one published, is written
            optimizer.beforeForward(List.of(model.params.get(3)));
            assertValues(model, initial.get(0), expected.get(1), initial.get(2), expected.get(3));
            optimizer.beforeForward(List.of(model.params.get(2)));
            assertValues(model, initial.get(0), expected.get(1), expected.get(2), expected.get(3));
            optimizer.beforeForward(List.of(model.params.get(3), model.params.get(2))); // written already
            assertValues(model, initial.get(0), expected.get(1), expected.get(2), expected.get(3));
            optimizer.finishParamSync();
            assertValues(model, expected.get(0), expected.get(1), expected.get(2), expected.get(3));
            optimizer.finishParamSync(); // nothing pending
            optimizer.beforeForward(model.params);
            assertValues(model, expected.get(0), expected.get(1), expected.get(2), expected.get(3));
            optimizer.close();
            ddp.close();
            model.close();
            return null;
        });
    }

    /**
     * A backend whose started all-gathers have not run when the step returns: each runs only when it
     * is awaited. The forward that asks for a parameter is what runs (waits for) its bucket's gather,
     * and only that one; the others stay unrun until asked for or finished.
     */
    @Test
    void aForwardThatReachesABucketBeforeItsGatherRanWaitsForThatGatherOnly() {
        List<List<float[]>> reference = oneStep(GATHERED);
        List<float[]> initial = TinyMlp.initialValues();
        InJvmWorld.run(2, rank -> {
            List<String> log = new ArrayList<>();
            ProcessGroups groups = ProcessGroups.create(ParallelDims.of(2, 1, 1), deferringGathers(rank.backend(), log));
            TinyMlp model = new TinyMlp(rank.manager(), DataType.FLOAT32);
            DistributedDataParallel ddp = new DistributedDataParallel(model.params, groups, OVERLAPPED, List.of());
            MegatronOptimizer optimizer = Optimizers.create(model.params, ddp, groups, OVERLAPPED);
            step(model, ddp, optimizer, groups, 0, 1);
            // published in forward order: fc1.weight's bucket, the biases' (fc1.bias is second), fc2.weight's
            assertEquals(List.of("start 30", "start 7", "start 15"), log);
            assertValues(model, initial.toArray(float[][]::new));
            optimizer.beforeForward(List.of(model.params.get(2)));
            assertEquals(List.of("start 30", "start 7", "start 15", "run 15"), log);
            List<float[]> expected = reference.get(rank.rank());
            assertValues(model, initial.get(0), initial.get(1), expected.get(2), initial.get(3));
            optimizer.beforeForward(List.of(model.params.get(0), model.params.get(1)));
            assertEquals(List.of("start 30", "start 7", "start 15", "run 15", "run 30", "run 7"), log);
            assertValues(model, expected.get(0), expected.get(1), expected.get(2), expected.get(3));
            optimizer.close();
            ddp.close();
            model.close();
            return null;
        });
    }

    /**
     * {@code backend}'s communicators, except that a started all-gather runs when awaited; {@code log}
     * records "start N" and "run N" for a shard of N elements.
     */
    private static Backend deferringGathers(Backend backend, List<String> log) {
        return new Backend() {
            @Override
            public int worldRank() {
                return backend.worldRank();
            }

            @Override
            public int worldSize() {
                return backend.worldSize();
            }

            @Override
            public Communicator communicator(ProcessGroup group) {
                Communicator inner = backend.communicator(group);
                return (Communicator) Proxy.newProxyInstance(Communicator.class.getClassLoader(),
                        new Class<?>[] {Communicator.class}, (proxy, method, args) -> {
                            if (method.getName().equals("startAllGather")) {
                                NDArray input = (NDArray) args[0];
                                NDManager owner = (NDManager) args[1];
                                long n = input.size();
                                log.add("start " + n);
                                return (PendingCollective) () -> {
                                    log.add("run " + n);
                                    return inner.allGather(input, 0, owner);
                                };
                            }
                            try {
                                return method.isDefault() ? InvocationHandler.invokeDefault(proxy, method, args)
                                        : method.invoke(inner, args);
                            } catch (InvocationTargetException e) {
                                throw e.getCause();
                            }
                        });
            }

            @Override
            public void close() {}
        };
    }

    @Test
    void closingTheOptimizerWritesWhatIsStillPending() {
        List<List<float[]>> reference = oneStep(GATHERED);
        InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(2, 1, 1));
            TinyMlp model = new TinyMlp(rank.manager(), DataType.FLOAT32);
            DistributedDataParallel ddp = new DistributedDataParallel(model.params, groups, OVERLAPPED, List.of());
            MegatronOptimizer optimizer = Optimizers.create(model.params, ddp, groups, OVERLAPPED);
            step(model, ddp, optimizer, groups, 0, 1);
            optimizer.beforeForward(List.of(model.params.get(1)));
            optimizer.close();
            List<float[]> expected = reference.get(rank.rank());
            assertValues(model, expected.get(0), expected.get(1), expected.get(2), expected.get(3));
            ddp.close();
            model.close();
            return null;
        });
    }

    /**
     * Four ranks, three steps of two micro-batches, float32 and float16 parameters: a model that asks for
     * its parameters before each forward (the first micro-batch in reverse order, the second in forward
     * order) trains to exactly the weights and losses of the immediate gather.
     */
    @Test
    void trainingThatAsksBeforeEachForwardEqualsTheImmediateGatherExactly() {
        for (DataType dtype : List.of(DataType.FLOAT32, DataType.FLOAT16)) {
            boolean half = dtype == DataType.FLOAT16;
            OptimizerConfig plain = GATHERED.toBuilder().fp16(half).overlapGradReduce(true).build();
            List<Trained> reference = train(plain, dtype);
            List<Trained> overlapped = train(plain.toBuilder().overlapParamGather(true).build(), dtype);
            for (int r = 0; r < 4; r++) {
                assertEquals(reference.get(r).losses(), overlapped.get(r).losses(), dtype + " losses on rank " + r);
                for (int i = 0; i < 4; i++) {
                    assertArrayEquals(reference.get(r).params().get(i), overlapped.get(r).params().get(i),
                            dtype + " " + TinyMlp.NAMES.get(i) + " on rank " + r);
                }
            }
            assertTrue(DataParallelTraining.maxAbsDiffFromStart(reference.get(0).params()) > 1e-3, "the weights must move");
        }
    }

    private record Trained(List<Double> losses, List<float[]> params) {}

    private static List<Trained> train(OptimizerConfig config, DataType dtype) {
        return InJvmWorld.run(4, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(4, 1, 1));
            TinyMlp model = new TinyMlp(rank.manager(), dtype);
            DistributedDataParallel ddp = new DistributedDataParallel(model.params, groups, config, List.of());
            MegatronOptimizer optimizer = Optimizers.create(model.params, ddp, groups, config);
            List<Double> losses = new ArrayList<>();
            for (int s = 0; s < 3; s++) {
                losses.add(step(model, ddp, optimizer, groups, s, 2));
            }
            optimizer.finishParamSync();
            Trained out = new Trained(losses, model.values());
            optimizer.close();
            ddp.close();
            model.close();
            return out;
        });
    }

    /** One step over a global batch of 8 rows; before each micro-batch's forward the model asks for its parameters. */
    private static double step(TinyMlp model, DistributedDataParallel ddp, MegatronOptimizer optimizer,
                               ProcessGroups groups, int step, int microBatches) {
        int world = groups.dims().dataParallel();
        int perRank = 8 / world;
        int perMicro = perRank / microBatches;
        float[][] batch = TinyMlp.batch(step, 8);
        double loss = 0;
        ddp.expectBackwardPasses(microBatches);
        for (int mb = 0; mb < microBatches; mb++) {
            List<Parameter> asked = new ArrayList<>(model.params);
            if (mb == 0) {
                Collections.reverse(asked);
            }
            for (Parameter p : asked) {
                optimizer.beforeForward(List.of(p));
            }
            int from = groups.dataParallelRank() * perRank + mb * perMicro;
            loss += model.forwardBackward(model.params.get(0).data().getManager(), TinyMlp.rows(batch[0], TinyMlp.IN, from, perMicro), TinyMlp.rows(batch[1], TinyMlp.OUT, from, perMicro),
                    perMicro, optimizer.lossScale() / microBatches);
            for (int i = model.params.size() - 1; i >= 0; i--) {
                ddp.gradientsReady(List.of(model.params.get(i)));
            }
        }
        ddp.finishGradSync();
        optimizer.step(1e-2, 0.01);
        optimizer.zeroGrad();
        return loss / microBatches;
    }

    private static void assertValues(TinyMlp model, float[]... expected) {
        List<float[]> values = model.values();
        for (int i = 0; i < expected.length; i++) {
            assertArrayEquals(expected[i], values.get(i), TinyMlp.NAMES.get(i));
        }
    }
}
