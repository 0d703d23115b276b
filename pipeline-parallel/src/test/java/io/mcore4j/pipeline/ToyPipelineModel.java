package io.mcore4j.pipeline;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.nn.Activation;
import ai.djl.nn.core.Linear;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.core.random.DeterministicRandom;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ReduceOp;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Test model: residual MLP layers {@code y = gelu(x W1^T + b1) W2^T + b2 + x} on activations of
 * shape {@code [seq, microBatch, hidden]}, and a mean-squared-error loss against a target derived
 * from the micro-batch index. Layer {@code l}'s weights are drawn from a generator seeded by
 * {@code l}, so every layout holds the same global weights. With a tensor-parallel communicator,
 * {@code W1}/{@code b1} are split by rows (column parallel) and {@code W2} by columns (row parallel),
 * joined by the test-only {@link CopyToRegion} and {@link ReduceFromRegion} functions.
 */
final class ToyPipelineModel implements AutoCloseable {
    static final int LAYERS = 8;
    static final int HIDDEN = 8;
    static final int FFN = 8;
    static final int MICRO = 2;
    static final int SEQ = 4;
    static final Shape ACTIVATION = new Shape(SEQ, MICRO, HIDDEN);

    private final NDManager params;
    private final int[][] layersByChunk;
    private final boolean lastRank;
    private final Map<String, NDArray> weights = new LinkedHashMap<>();
    private final Function copyToRegion;
    private final Function reduceFromRegion;
    private final boolean variableSeq;
    private final List<VirtualMicroBatch> forwardCalls = new ArrayList<>();

    /**
     * @param parent owner of the parameters' manager
     * @param layout which layers each (rank, chunk) holds
     * @param pipelineRank this rank's stage
     * @param tp tensor-parallel communicator, or null for whole weights
     * @param variableSeq whether the sequence length depends on the micro-batch
     */
    ToyPipelineModel(NDManager parent, LayerAssignment layout, int pipelineRank, Communicator tp, boolean variableSeq) {
        this.params = parent.newSubManager();
        this.lastRank = pipelineRank == layout.pipelineSize() - 1;
        this.variableSeq = variableSeq;
        this.layersByChunk = new int[layout.virtualSize()][];
        int tpSize = tp == null ? 1 : tp.size();
        int tpRank = tp == null ? 0 : tp.rank();
        for (int c = 0; c < layout.virtualSize(); c++) {
            layersByChunk[c] = layout.layers(pipelineRank, c);
            for (int layer : layersByChunk[c]) {
                try (NDManager temp = params.newSubManager()) {
                    DeterministicRandom r = new DeterministicRandom(100 + layer);
                    NDArray w1 = r.normal(temp, new Shape(FFN, HIDDEN), 0, 0.25, DataType.FLOAT32);
                    NDArray b1 = r.normal(temp, new Shape(FFN), 0, 0.1, DataType.FLOAT32);
                    NDArray w2 = r.normal(temp, new Shape(HIDDEN, FFN), 0, 0.25, DataType.FLOAT32);
                    NDArray b2 = r.normal(temp, new Shape(HIDDEN), 0, 0.1, DataType.FLOAT32);
                    keep(key(layer, "w1"), Tensors.chunk(w1, 0, tpSize, tpRank));
                    keep(key(layer, "b1"), Tensors.chunk(b1, 0, tpSize, tpRank));
                    keep(key(layer, "w2"), Tensors.chunk(w2, 1, tpSize, tpRank));
                    keep(key(layer, "b2"), b2);
                }
            }
        }
        this.copyToRegion = tp == null ? null : new CopyToRegion(tp);
        this.reduceFromRegion = tp == null ? null : new ReduceFromRegion(tp);
    }

    private void keep(String name, NDArray slice) {
        NDArray p = slice.duplicate();
        p.attach(params);
        p.setRequiresGradient(true);
        weights.put(name, p);
    }

    static String key(int layer, String name) {
        return "layer" + layer + "." + name;
    }

    static int seqLength(int microBatch, boolean variable) {
        return variable ? 3 + microBatch % 3 : SEQ;
    }

    static NDArray data(NDManager m, int microBatch, boolean variable) {
        return new DeterministicRandom(7000 + microBatch).normal(m,
                new Shape(seqLength(microBatch, variable), MICRO, HIDDEN), 0, 1, DataType.FLOAT32);
    }

    static NDArray target(NDManager m, int microBatch, boolean variable) {
        return new DeterministicRandom(9000 + microBatch).normal(m,
                new Shape(seqLength(microBatch, variable), MICRO, HIDDEN), 0, 1, DataType.FLOAT32);
    }

    /** The {@link ForwardStep}: runs a chunk's layers; the last chunk of the last rank returns the loss. */
    NDArray forward(AutogradScope scope, int chunk, int microBatch, NDArray input) {
        forwardCalls.add(new VirtualMicroBatch(chunk, microBatch));
        NDArray x = input == null ? data(scope.manager(), microBatch, variableSeq) : input;
        x = layers(scope, layersByChunk[chunk], x);
        if (lastRank && chunk == layersByChunk.length - 1) {
            return loss(scope.manager(), x, microBatch, variableSeq);
        }
        return x;
    }

    NDArray layers(AutogradScope scope, int[] layers, NDArray x) {
        for (int layer : layers) {
            NDArray in = copyToRegion == null ? x : scope.apply1(copyToRegion, x);
            NDArray h = Activation.gelu(Linear.linear(in, weights.get(key(layer, "w1")), weights.get(key(layer, "b1"))).head());
            NDArray y;
            if (reduceFromRegion == null) {
                y = Linear.linear(h, weights.get(key(layer, "w2")), weights.get(key(layer, "b2"))).head();
            } else {
                NDArray partial = Linear.linear(h, weights.get(key(layer, "w2"))).head();
                y = scope.apply1(reduceFromRegion, partial).add(weights.get(key(layer, "b2")));
            }
            x = y.add(x);
        }
        return x;
    }

    static NDArray loss(NDManager m, NDArray x, int microBatch, boolean variable) {
        return x.sub(target(m, microBatch, variable)).square().mean();
    }

    /** @return every layer's parameters by name, e.g. {@code layer3.w1} */
    Map<String, NDArray> weights() {
        return weights;
    }

    /** @return copies of the accumulated gradients (null where none was written) */
    Map<String, float[]> gradients() {
        Map<String, float[]> out = new LinkedHashMap<>();
        try (NDManager temp = params.newSubManager()) {
            weights.forEach((k, v) -> {
                NDArray g = Tensors.gradientOrNull(v, temp);
                out.put(k, g == null ? null : g.toFloatArray());
            });
        }
        return out;
    }

    /** @return the (chunk, micro-batch) of each forward call, in call order */
    List<VirtualMicroBatch> forwardCalls() {
        return List.copyOf(forwardCalls);
    }

    @Override
    public void close() {
        params.close();
    }

    /** Identity forward; all-reduce of the gradient over the tensor-parallel group backward. */
    static final class CopyToRegion implements Function {
        private final Communicator tp;

        CopyToRegion(Communicator tp) {
            this.tp = tp;
        }

        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return inputs.clone();
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... gradOutputs) {
            return new NDArray[] {tp.allReduce(gradOutputs[0], ReduceOp.SUM, ctx.manager())};
        }
    }

    /** All-reduce over the tensor-parallel group forward; identity backward. */
    static final class ReduceFromRegion implements Function {
        private final Communicator tp;

        ReduceFromRegion(Communicator tp) {
            this.tp = tp;
        }

        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return new NDArray[] {tp.allReduce(inputs[0], ReduceOp.SUM, ctx.manager())};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... gradOutputs) {
            return new NDArray[] {gradOutputs[0]};
        }
    }
}
