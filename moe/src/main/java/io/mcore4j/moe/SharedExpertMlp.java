package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.nn.Activation;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Module;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.tensorparallel.ColumnParallelLinear;
import io.mcore4j.tensorparallel.Initializers;
import io.mcore4j.tensorparallel.RowParallelLinear;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The shared expert: a dense MLP every token passes through, added to the routed experts' output
 * (Megatron-Core's {@code SharedExpertMLP}). It is an ordinary tensor-parallel MLP over the dense TP
 * group: a {@link ColumnParallelLinear} (strided for SwiGLU) and a {@link RowParallelLinear}, with
 * sequence parallelism as configured; its parameters are dense (averaged over data parallelism).
 * Keys: {@code linear_fc1.weight}, {@code linear_fc2.weight} (and biases) under the given prefix.
 */
final class SharedExpertMlp implements Module {
    private final boolean glu;
    private final ColumnParallelLinear fc1;
    private final RowParallelLinear fc2;
    private final boolean dataParallelReplica;

    SharedExpertMlp(MoeConfig config, int hiddenSize, MoeGroups groups, NDManager parameters, SeedScheme seeds,
                    String keyPrefix) {
        Communicator tp = groups.tp();
        this.dataParallelReplica = groups.isDenseDataParallelReplica();
        int width = config.sharedExpertFfnHiddenSize();
        this.glu = config.activation() == MoeConfig.Activation.SWIGLU;
        String key = keyPrefix + "shared_experts.";
        this.fc1 = ColumnParallelLinear.builder(hiddenSize, glu ? 2 * width : width, tp).bias(config.addBias())
                .sequenceParallel(config.sequenceParallel()).stride(glu ? 2 : 1)
                .initializer(Initializers.normal(config.initStd(), seeds.seed("init/" + key + "linear_fc1.weight")))
                .dtype(config.dtype()).manager(parameters).name(key + "linear_fc1").build();
        this.fc2 = RowParallelLinear.builder(width, hiddenSize, tp).bias(config.addBias()).inputIsParallel(true)
                .sequenceParallel(config.sequenceParallel())
                .initializer(Initializers.normal(config.outputInitStd(), seeds.seed("init/" + key + "linear_fc2.weight")))
                .dtype(config.dtype()).manager(parameters).name(key + "linear_fc2").build();
    }

    /**
     * @param scope the pass's scope
     * @param hidden the layer's input {@code [s, b, h]} ({@code [s/TP, b, h]} with sequence parallelism)
     * @return the shared expert's output, same shape
     */
    NDArray forward(AutogradScope scope, NDArray hidden) {
        NDManager m = scope.manager();
        NDArray h = fc1.forward(scope, hidden).output();
        if (glu) {
            NDList parts = h.split(2, h.getShape().dimension() - 1);
            parts.attach(m);
            NDArray gate = parts.get(0);
            h = LocalOps.own(gate.mul(Activation.sigmoid(gate)).mul(parts.get(1)), m);
        } else {
            h = LocalOps.own(Activation.gelu(h), m);
        }
        return fc2.forward(scope, h).output();
    }

    @Override
    public List<Parameter> parameters() {
        List<Parameter> out = new ArrayList<>(fc1.parameters());
        out.addAll(fc2.parameters());
        return out;
    }

    @Override
    public Map<String, Parameter> namedParameters(String prefix) {
        Map<String, Parameter> out = new LinkedHashMap<>(fc1.namedParameters(prefix + "linear_fc1."));
        out.putAll(fc2.namedParameters(prefix + "linear_fc2."));
        return out;
    }

    /** The linears' pieces, which are non-main replicas on data- or context-parallel ranks above 0. */
    @Override
    public List<ShardedTensor> shardedState(String prefix) {
        List<ShardedTensor> pieces = new ArrayList<>(fc1.shardedState(prefix + "linear_fc1."));
        pieces.addAll(fc2.shardedState(prefix + "linear_fc2."));
        List<ShardedTensor> out = new ArrayList<>(pieces.size());
        for (ShardedTensor t : pieces) {
            out.add(t.replicatedIf(dataParallelReplica));
        }
        return out;
    }

    @Override
    public void close() {
        fc1.close();
        fc2.close();
    }
}
