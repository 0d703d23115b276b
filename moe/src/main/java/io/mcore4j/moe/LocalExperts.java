package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.AbstractModule;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.tensorparallel.Initializers;
import io.mcore4j.tensorparallel.Mappings;
import io.mcore4j.tensorparallel.StridedPartition;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * This rank's {@code E / EP} experts, each an MLP {@code fc2(act(fc1 x))} (GELU, or SwiGLU over a
 * fused {@code [gate; up]} fc1), optionally tensor-parallel over the expert-TP group: fc1 is split
 * along its output rows (strided by 2 for SwiGLU, so each rank holds its slice of the gate and of the
 * up projection) and fc2 along its input columns, as in a column-parallel / row-parallel pair.
 *
 * <p><b>Communication.</b> None here. With expert tensor parallelism the dispatcher gives every
 * expert-TP rank the same rows and reduce-scatters the partial outputs (Megatron-Core's explicit
 * expert communication), which halves the traffic of running the column/row-parallel linears with
 * their own all-reduce. The one exception is the fc2 bias: it is added on expert-TP rank 0 only (the
 * reduction then counts it once) after an identity whose backward all-reduces its gradient over
 * expert-TP, so every copy receives the full gradient.
 *
 * <p><b>Parameters.</b> One {@link Parameter} per weight and expert, kind {@link Parameter.Kind#EXPERT}
 * (gradients averaged over expert-DP by the optimizer), named
 * {@code local_experts.<global index>.linear_fc1.weight} and so on. Each expert's full weight is
 * built with {@link Initializers#normal} seeded by {@code seeds.seed("init/" + key)} for its global key
 * and sliced, so every layout holds slices of the same global weights.
 *
 * <p><b>Paths.</b> {@link #forward} chooses, in one place: with {@link MoeConfig#groupedGemm()}, fc1 and fc2
 * of all local experts as one grouped product each ({@link GroupedMatmul#select}: libtorch's
 * {@code _grouped_mm} where it runs, else rows padded per expert and one batched matmul), whatever the
 * rows per expert; otherwise the experts one after another on their rows (an expert with no rows
 * still runs on an empty tensor: its gradients are zero and collectives stay matched), or, when every
 * local expert has the same number of rows and batching is enabled, one batched matmul. Every path
 * computes the same function; the weights are stacked per pass for the grouped ones. Where the grouped product is
 * the padded one, the whole MLP runs in its padded layout (padded and unpadded once, each bias added to its slab
 * by one broadcast).
 */
final class LocalExperts extends AbstractModule {
    private final MoeConfig config;
    private final int hiddenSize;
    private final Communicator expertTp;
    private final int firstLocalExpert;
    private final List<Parameter> fc1Weights = new ArrayList<>();
    private final List<Parameter> fc1Biases = new ArrayList<>();
    private final List<Parameter> fc2Weights = new ArrayList<>();
    private final List<Parameter> fc2Biases = new ArrayList<>();
    private final List<ShardedTensor> pieces = new ArrayList<>();
    private final NDManager pieceViews;
    private final GroupedMatmul grouped;
    /**
     * The whole MLP as one Function on the grouped kernel, where it runs and every width's rows are 16-byte aligned
     * as the kernel reads them; else null (the composed products, which fall back per product).
     */
    private final GroupedExpertMlp fusedMlp;

    LocalExperts(MoeConfig config, int hiddenSize, MoeGroups groups, NDManager parameters, SeedScheme seeds,
                 String keyPrefix) {
        this.config = config;
        this.hiddenSize = hiddenSize;
        this.expertTp = groups.expertTp();
        int localCount = config.numExperts() / groups.ep().size();
        this.firstLocalExpert = groups.ep().rank() * localCount;
        int etp = expertTp.size();
        int etpRank = expertTp.rank();
        int factor = config.activation().fc1Factor();
        int fc1Out = factor * config.ffnHiddenSize();
        StridedPartition rows = new StridedPartition(0, etpRank, etp, factor);
        StridedPartition columns = new StridedPartition(1, etpRank, etp, 1);
        // SwiGLU's fused [gate; up] rows are strided: the parameter's partition must say so, or the
        // optimizer would place its state for these rows as one contiguous block
        Parameter.Partition rowSplit = rows.parameterPartition();
        Parameter.Partition columnSplit = columns.parameterPartition();
        int expertDpRank = groups.expertDp().rank();
        // the fc2 bias is whole on every expert-TP rank: one main copy per expert
        int biasReplica = etpRank + etp * expertDpRank;
        // checkpoint pieces are views of detached handles: a parameter's leaf is replaced whenever its
        // gradient is set to none, its storage never is
        this.pieceViews = parameters.newSubManager();
        this.grouped = config.groupedGemm() ? GroupedMatmul.select(parameters, config.dtype()) : null;
        GroupedExpertMlp kernelMlp = grouped instanceof GroupedMatmul.Kernel
                ? GroupedExpertMlp.kernel(config.activation()) : null;
        for (int l = 0; l < localCount; l++) {
            String name = "local_experts." + (firstLocalExpert + l) + ".";
            String key = keyPrefix + "experts." + name;
            Parameter w1 = new Parameter(name + "linear_fc1.weight", Initializers.normal(config.initStd(),
                    seeds.seed("init/" + key + "linear_fc1.weight")).createShard(parameters,
                    new Shape(fc1Out, hiddenSize), config.dtype(), rows), rowSplit, Parameter.Kind.EXPERT);
            Parameter w2 = new Parameter(name + "linear_fc2.weight", Initializers.normal(config.outputInitStd(),
                    seeds.seed("init/" + key + "linear_fc2.weight")).createShard(parameters,
                    new Shape(hiddenSize, config.ffnHiddenSize()), config.dtype(), columns), columnSplit,
                    Parameter.Kind.EXPERT);
            fc1Weights.add(registerParameter(w1));
            fc2Weights.add(registerParameter(w2));
            pieces.addAll(rows.describe(w1.name(), Tensors.detach(w1.data(), pieceViews), pieceViews, expertDpRank));
            pieces.addAll(columns.describe(w2.name(), Tensors.detach(w2.data(), pieceViews), pieceViews, expertDpRank));
            if (config.addBias()) {
                Parameter b1 = new Parameter(name + "linear_fc1.bias", Initializers.zeros().createShard(parameters,
                        new Shape(fc1Out), config.dtype(), rows), rowSplit, Parameter.Kind.EXPERT);
                Parameter b2 = new Parameter(name + "linear_fc2.bias", Initializers.zeros().create(parameters,
                        new Shape(hiddenSize), config.dtype()), Parameter.Partition.NONE, Parameter.Kind.EXPERT);
                fc1Biases.add(registerParameter(b1));
                fc2Biases.add(registerParameter(b2));
                pieces.addAll(rows.describe(b1.name(), Tensors.detach(b1.data(), pieceViews), pieceViews, expertDpRank));
                pieces.add(ShardedTensor.whole(b2.name(), Tensors.detach(b2.data(), pieceViews)).replicatedIf(biasReplica != 0));
            }
        }
        this.fusedMlp = kernelMlp != null && rowsAligned(config) ? kernelMlp : null;
    }

    /**
     * Runs every local expert on its rows.
     *
     * @param scope the pass's scope; owns the output
     * @param input {@code [N, h]}: the rows of local expert 0, then 1, ...
     * @param tokensPerExpert rows per local expert, summing to N
     * @return {@code [N, h]} outputs in the same order (partial sums over expert-TP when it is above 1)
     * @throws IllegalArgumentException if the counts do not match the input
     */
    NDArray forward(AutogradScope scope, NDArray input, long[] tokensPerExpert) {
        return forward(scope, input, tokensPerExpert, null);
    }

    /**
     * Runs every local expert on its rows; see {@link #forward(AutogradScope, NDArray, long[])}.
     *
     * @param scope the pass's scope; owns the output
     * @param input {@code [N, h]}: the rows of local expert 0, then 1, ...
     * @param tokensPerExpert rows per local expert, summing to N
     * @param ends the running sums of {@code tokensPerExpert} as int32 on the rows' device, or null: the grouped
     *             GEMM's group ends, made here from the counts otherwise (once for both products)
     * @return {@code [N, h]} outputs in the same order (partial sums over expert-TP when it is above 1)
     */
    NDArray forward(AutogradScope scope, NDArray input, long[] tokensPerExpert, NDArray ends) {
        if (tokensPerExpert.length != fc1Weights.size()) {
            throw new IllegalArgumentException(tokensPerExpert.length + " token counts for " + fc1Weights.size()
                    + " local experts");
        }
        long total = TokenPermutation.sum(tokensPerExpert, 0, tokensPerExpert.length);
        if (input.getShape().get(0) != total || input.getShape().get(1) != hiddenSize) {
            throw new IllegalArgumentException("expert input of shape " + input.getShape() + " does not hold "
                    + total + " rows of width " + hiddenSize);
        }
        if (grouped != null) {
            return forwardGrouped(scope, input, tokensPerExpert, grouped, ends);
        }
        if (config.batchedExperts() && allEqual(tokensPerExpert) && tokensPerExpert[0] > 0) {
            return forwardGrouped(scope, input, tokensPerExpert, GroupedMatmul.PADDED, null);
        }
        return forwardSequential(scope, input, tokensPerExpert);
    }

    /** One expert after another on consecutive row ranges. */
    NDArray forwardSequential(AutogradScope scope, NDArray input, long[] tokensPerExpert) {
        NDManager m = scope.manager();
        List<NDArray> fc2Bias = fc2BiasRowsForPass(scope);
        NDList outputs = new NDList(tokensPerExpert.length);
        long offset = 0;
        for (int l = 0; l < tokensPerExpert.length; l++) {
            long rows = tokensPerExpert[l];
            NDArray x = Tensors.own(Tensors.narrow(input, 0, offset, offset + rows), m);
            offset += rows;
            NDArray h = Tensors.linear(x, fc1Weights.get(l).data(),
                    fc1Biases.isEmpty() ? null : fc1Biases.get(l).data(), m);
            NDArray y = Tensors.linear(config.activation().apply(scope, h), fc2Weights.get(l).data(), null, m);
            if (fc2Bias != null) {
                y = Tensors.own(y.add(fc2Bias.get(l)), m);
            }
            if (rows > 0 || outputs.isEmpty()) {
                outputs.add(y);
            }
        }
        // libtorch's cat of nothing but empty tensors drops their autograd history; the output must
        // require grad on every rank alike so that the dispatcher's collectives are recorded alike
        return outputs.size() == 1 ? outputs.get(0) : Tensors.own(NDArrays.concat(outputs, 0), m);
    }

    /**
     * All experts at once: fc1 of every expert in one grouped product, the activation, fc2 in one grouped product,
     * against weights stacked along a leading expert dim; each expert's bias is added to its own rows.
     */
    NDArray forwardGrouped(AutogradScope scope, NDArray input, long[] tokensPerExpert, GroupedMatmul matmul) {
        return forwardGrouped(scope, input, tokensPerExpert, matmul, null);
    }

    /** {@link #forwardGrouped(AutogradScope, NDArray, long[], GroupedMatmul)} with the group ends given, or null. */
    NDArray forwardGrouped(AutogradScope scope, NDArray input, long[] tokensPerExpert, GroupedMatmul matmul,
                           NDArray ends) {
        if (matmul instanceof GroupedMatmul.Padded) {
            return forwardPadded(scope, input, tokensPerExpert);
        }
        NDManager m = scope.manager();
        GroupedMatmul.Groups groups = matmul.groups(tokensPerExpert, ends, input, m);
        // group ends on the device: rows there are
        if (matmul == grouped && fusedMlp != null && groups.ends() != null) {
            return forwardFused(scope, fusedMlp, input, groups);
        }
        NDArray h = matmul.apply(scope, input, stack(fc1Weights, m), groups); // [N, fc1/t]
        if (!fc1Biases.isEmpty()) {
            h = addExpertBiases(h, data(fc1Biases), tokensPerExpert, m);
        }
        NDArray y = matmul.apply(scope, config.activation().apply(scope, h), stack(fc2Weights, m), groups);
        List<NDArray> fc2Bias = fc2BiasRowsForPass(scope);
        return fc2Bias == null ? y : addExpertBiases(y, fc2Bias, tokensPerExpert, m);
    }

    /** Whether every width's rows (in the layer's dtype) are 16-byte aligned, as libtorch's grouped kernel reads them. */
    private boolean rowsAligned(MoeConfig config) {
        int bytes = config.dtype().getNumOfBytes();
        long fc1 = fc1Weights.get(0).data().getShape().get(0);
        long fc2In = fc2Weights.get(0).data().getShape().get(1);
        return hiddenSize * bytes % 16 == 0 && fc1 * bytes % 16 == 0 && fc2In * bytes % 16 == 0;
    }

    /** The whole MLP as one {@link GroupedExpertMlp} Function of the rows and the stacked weights and biases. */
    NDArray forwardFused(AutogradScope scope, GroupedExpertMlp mlp, NDArray input, GroupedMatmul.Groups groups) {
        NDManager m = scope.manager();
        NDArray b1 = fc1Biases.isEmpty() ? null : stack(fc1Biases, m);
        return mlp.apply(scope, input, stack(fc1Weights, m), b1, stack(fc2Weights, m), fc2BiasStackForPass(scope),
                groups.ends(), groups.counts());
    }

    /**
     * The grouped path through {@link GroupedMatmul.Padded}'s layout, entered once for the whole MLP: the rows padded
     * to {@code [E, longest, h]}, fc1 as one batched matmul with the stacked fc1 biases added by one broadcast, the
     * activation, fc2 likewise, and the padding dropped. Rows computed from padding rows are dropped, so they add
     * nothing to any gradient; each bias's gradient is the sum over its expert's rows. Two index-selects and two
     * broadcast adds per pass where two padded products would pad and unpad twice and add each expert's bias to its
     * rows one by one.
     */
    private NDArray forwardPadded(AutogradScope scope, NDArray input, long[] tokensPerExpert) {
        NDManager m = scope.manager();
        GroupedMatmul.Padded.Layout layout = new GroupedMatmul.Padded.Layout(tokensPerExpert);
        NDArray h = Tensors.own(layout.pad(input, m).matMul(transposedStack(fc1Weights, m)), m); // [E, L, fc1/t]
        if (!fc1Biases.isEmpty()) {
            h = Tensors.own(h.add(Tensors.own(stack(fc1Biases, m).expandDims(1), m)), m);
        }
        NDArray y = Tensors.own(config.activation().apply(scope, h).matMul(transposedStack(fc2Weights, m)), m);
        NDArray fc2Bias = fc2BiasStackForPass(scope);
        if (fc2Bias != null) {
            y = Tensors.own(y.add(Tensors.own(fc2Bias.expandDims(1), m)), m);
        }
        return layout.unpad(y, m);
    }

    /** The weights stacked {@code [E, out, in]} and transposed to {@code [E, in, out]} for a batched matmul. */
    private static NDArray transposedStack(List<Parameter> weights, NDManager m) {
        return Tensors.own(stack(weights, m).transpose(0, 2, 1), m);
    }

    /**
     * {@code rows} (expert by expert) with expert {@code e}'s bias added to its rows, one broadcast add per expert
     * with rows, on one split of the rows (whose backward is one concatenation, where a slice per expert would fill a
     * zero tensor of the full size each). Not a gather of a bias row per row: that materialises {@code [N, width]} and
     * its backward adds N rows into E bias rows with atomics, which on a GPU serialise on the few addresses; here each
     * bias's gradient is a plain sum over its rows. The biases are the parameters themselves (or one split of a
     * stacked tensor), not rows selected from a stack per expert: a selected row's backward fills a zero tensor of
     * the whole stack.
     *
     * @param rows {@code [N, width]}, {@code tokensPerExpert[e]} rows for expert e in turn
     * @param biases one {@code [width]} (or {@code [1, width]}) bias per expert
     * @param tokensPerExpert rows per expert
     * @param m owns the result
     * @return {@code [N, width]}
     */
    static NDArray addExpertBiases(NDArray rows, List<NDArray> biases, long[] tokensPerExpert, NDManager m) {
        if (TokenPermutation.sum(tokensPerExpert, 0, tokensPerExpert.length) == 0) {
            // no rows: the sum still reaches the biases (as zeros), so every rank records the same autograd graph
            NDArray out = rows;
            for (NDArray b : biases) {
                out = Tensors.own(out.add(b), m);
            }
            return out;
        }
        NDList segments = Tensors.split(rows, tokensPerExpert, 0);
        segments.attach(m);
        NDList parts = new NDList(tokensPerExpert.length);
        for (int e = 0; e < tokensPerExpert.length; e++) {
            if (tokensPerExpert[e] > 0) {
                parts.add(Tensors.own(segments.get(e).add(biases.get(e)), m));
            }
        }
        return parts.size() == 1 ? parts.get(0) : Tensors.own(NDArrays.concat(parts, 0), m);
    }

    /**
     * The fc2 biases to add on this rank, one per local expert, or null (none, or not expert-TP rank 0). With
     * expert tensor parallelism they are {@link #fc2BiasStackForPass}'s stack split again; otherwise they are the
     * parameters themselves.
     */
    private List<NDArray> fc2BiasRowsForPass(AutogradScope scope) {
        if (fc2Biases.isEmpty()) {
            return null;
        }
        if (expertTp.size() == 1) {
            return data(fc2Biases);
        }
        NDArray stacked = fc2BiasStackForPass(scope);
        if (stacked == null) {
            return null;
        }
        NDManager m = scope.manager();
        long[] ones = new long[fc2Biases.size()];
        Arrays.fill(ones, 1);
        NDList rows = Tensors.split(stacked, ones, 0);
        rows.attach(m);
        return rows;
    }

    /**
     * The fc2 biases to add on this rank stacked {@code [E, h]}, or null (none, or not expert-TP rank 0). With expert
     * tensor parallelism they pass through the identity whose backward all-reduces their gradient over expert-TP.
     */
    private NDArray fc2BiasStackForPass(AutogradScope scope) {
        if (fc2Biases.isEmpty()) {
            return null;
        }
        NDManager m = scope.manager();
        if (expertTp.size() == 1) {
            return stack(fc2Biases, m);
        }
        NDArray stacked = Mappings.copyToTensorParallelRegion(scope, expertTp, stack(fc2Biases, m));
        return expertTp.rank() == 0 ? stacked : null;
    }

    private static List<NDArray> data(List<Parameter> params) {
        List<NDArray> out = new ArrayList<>(params.size());
        for (Parameter p : params) {
            out.add(p.data());
        }
        return out;
    }

    private static NDArray stack(List<Parameter> params, NDManager m) {
        NDList list = new NDList(params.size());
        for (Parameter p : params) {
            list.add(p.data());
        }
        return Tensors.own(NDArrays.stack(list, 0), m);
    }

    private static boolean allEqual(long[] counts) {
        for (long c : counts) {
            if (c != counts[0]) {
                return false;
            }
        }
        return true;
    }

    /** @return whether the grouped products read group ends on the device (libtorch's grouped kernel runs) */
    boolean readsGroupEnds() {
        return grouped instanceof GroupedMatmul.Kernel;
    }

    /** @return global index of the first local expert */
    int firstLocalExpert() {
        return firstLocalExpert;
    }

    /** @return number of local experts */
    int size() {
        return fc1Weights.size();
    }

    /**
     * The parameters of local expert {@code local}: fc1 weight, fc2 weight, then the biases if any.
     *
     * @param local index among the local experts
     * @return its parameters
     */
    List<Parameter> expertParameters(int local) {
        List<Parameter> out = new ArrayList<>(List.of(fc1Weights.get(local), fc2Weights.get(local)));
        if (!fc1Biases.isEmpty()) {
            out.add(fc1Biases.get(local));
            out.add(fc2Biases.get(local));
        }
        return out;
    }

    /**
     * Each expert's pieces under {@code prefix + "local_experts.<global index>.linear_fc1.weight"}
     * etc., at their place in the expert's full weight; copies on expert-DP ranks other than 0 (and
     * the fc2 bias on expert-TP ranks other than 0) are non-main replicas.
     */
    @Override
    public List<ShardedTensor> shardedState(String prefix) {
        List<ShardedTensor> out = new ArrayList<>(pieces.size());
        for (ShardedTensor t : pieces) {
            out.add(t.withPrefix(prefix));
        }
        return out;
    }

    /** Closes the parameters and the views kept for checkpoint pieces. */
    @Override
    public void close() {
        super.close();
        pieceViews.close();
    }
}
