package io.mcore4j.optimizer;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.TorchScriptModule;
import io.mcore4j.core.TorchScriptModule.Arg;
import io.mcore4j.core.TorchScriptModules;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Adam or AdamW through libtorch's fused multi-tensor kernels ({@code _fused_adam_},
 * {@code _fused_adamw_}): one pass over the master weights, gradients and moments that also
 * unscales the gradients (the kernel's {@code grad_scale}) and applies the weight decay, instead
 * of about a dozen elementwise passes. {@link #applyAll} launches the kernel once per distinct
 * weight decay (the optimizer's buckets are uniform in it: usually two launches per step). DJL has
 * no API for the kernels; a TorchScript module that mcore4j generates
 * ({@code scripts/make_fused_adam_module.py}) calls them on lists of tensors. The math is
 * torch.optim.Adam's and AdamW's with the same bias corrections, so weights and moments agree with
 * {@link AdamUpdate} to rounding; state names match it, so checkpoints move freely between the two.
 */
final class FusedAdamUpdate implements UpdateRule {
    static final String RESOURCE = "/io/mcore4j/optimizer/fused_adam.pt";

    private final double beta1;
    private final double beta2;
    private final double eps;
    private final boolean decoupled;
    private final TorchScriptModule kernel;

    FusedAdamUpdate(double beta1, double beta2, double eps, boolean decoupled, NDManager owner) {
        this.beta1 = beta1;
        this.beta2 = beta2;
        this.eps = eps;
        this.decoupled = decoupled;
        this.kernel = TorchScriptModules.load(owner, FusedAdamUpdate.class, RESOURCE);
    }

    @Override
    public List<String> stateNames() {
        return List.of("exp_avg", "exp_avg_sq");
    }

    @Override
    public void apply(NDArray master, NDArray grad, NDArray[] state, double lr, double weightDecay, long step,
                      NDManager temp) {
        applyAll(List.of(new ShardUpdate(master, grad, List.of(state), weightDecay)), lr, step, 1, temp);
    }

    /**
     * Launches the kernel once per distinct weight decay, in order of first appearance. The shards
     * must share one device and dtype; a gradient of another dtype is converted first.
     *
     * @throws IllegalArgumentException if a shard does not have two state tensors, or the divisor
     *     is not positive and finite
     */
    @Override
    public void applyAll(List<ShardUpdate> shards, double lr, long step, double gradDivisor, NDManager temp) {
        UpdateRule.requireStateCount(shards, stateNames());
        UpdateRule.requireDivisor(gradDivisor);
        if (shards.isEmpty()) {
            return;
        }
        NDArray first = shards.get(0).master();
        // the kernel only reads a shard's step count (for the bias corrections), so one tensor serves all
        NDArray stepCount = temp.full(new Shape(), step, DataType.FLOAT32, first.getDevice());
        NDArray divisor = temp.full(new Shape(), (float) gradDivisor, DataType.FLOAT32, first.getDevice());
        Map<Double, List<ShardUpdate>> byDecay = new LinkedHashMap<>();
        for (ShardUpdate s : shards) {
            byDecay.computeIfAbsent(s.weightDecay(), wd -> new ArrayList<>()).add(s);
        }
        for (Map.Entry<Double, List<ShardUpdate>> group : byDecay.entrySet()) {
            launch(group.getValue(), lr, group.getKey(), stepCount, divisor, temp);
        }
    }

    private void launch(List<ShardUpdate> shards, double lr, double weightDecay, NDArray stepCount, NDArray divisor,
                        NDManager temp) {
        int n = shards.size();
        List<NDArray> params = new ArrayList<>(n);
        List<NDArray> grads = new ArrayList<>(n);
        List<NDArray> expAvgs = new ArrayList<>(n);
        List<NDArray> expAvgSqs = new ArrayList<>(n);
        List<NDArray> steps = new ArrayList<>(n);
        for (ShardUpdate s : shards) {
            NDArray master = s.master();
            NDArray g = s.grad().getDataType() == master.getDataType() ? s.grad()
                    : Tensors.own(s.grad().toType(master.getDataType(), true), temp);
            params.add(master);
            grads.add(g);
            expAvgs.add(s.state().get(0));
            expAvgSqs.add(s.state().get(1));
            steps.add(stepCount);
        }
        double[] hyper = {lr, beta1, beta2, eps, weightDecay, decoupled ? 1 : 0};
        try (NDManager host = temp.newSubManager(Device.cpu())) {
            // lists built straight from the tensors' handles: no renamed handle per tensor, as DJL's
            // NDList route ("x[]" names) would need
            kernel.call(Arg.list(params), Arg.list(grads), Arg.list(expAvgs), Arg.list(expAvgSqs), Arg.list(steps),
                    Arg.tensor(host.create(hyper)), Arg.tensor(divisor));
        }
    }
}
