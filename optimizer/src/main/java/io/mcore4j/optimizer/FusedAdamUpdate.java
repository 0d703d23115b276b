package io.mcore4j.optimizer;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.engine.PtSymbolBlock;
import ai.djl.pytorch.jni.IValue;
import io.mcore4j.core.TorchScriptModules;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Adam or AdamW through libtorch's fused multi-tensor kernel: one pass over the master weights,
 * gradients and moments instead of about a dozen elementwise passes, and one kernel call for all
 * the shards of a step ({@link #applyAll}). DJL has no API for the kernel; a TorchScript module
 * that mcore4j generates ({@code scripts/make_fused_adam_module.py}) calls it on lists of tensors.
 * The math is torch.optim.Adam's with the same bias corrections; weight decay (one value per shard,
 * 0 for a bucket that does not decay) is applied here exactly as {@link AdamUpdate} applies it, and
 * the kernel runs without it. State names match {@link AdamUpdate}, so checkpoints move freely
 * between the two.
 */
final class FusedAdamUpdate implements UpdateRule {
    static final String RESOURCE = "/io/mcore4j/optimizer/fused_adam.pt";

    private final double beta1;
    private final double beta2;
    private final double eps;
    private final boolean decoupled;
    private final PtSymbolBlock kernel;

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
        applyAll(List.of(new ShardUpdate(master, grad, List.of(state), weightDecay)), lr, step, temp);
    }

    /**
     * Applies weight decay shard by shard (one device scalar per distinct weight decay), then
     * launches the kernel once for all shards. The shards must share one device and dtype.
     *
     * @throws IllegalArgumentException if a shard does not have two state tensors
     */
    @Override
    public void applyAll(List<ShardUpdate> shards, double lr, long step, NDManager temp) {
        if (shards.isEmpty()) {
            return;
        }
        UpdateRule.requireStateCount(shards, stateNames());
        int n = shards.size();
        PtNDArray[] params = new PtNDArray[n];
        PtNDArray[] grads = new PtNDArray[n];
        PtNDArray[] expAvgs = new PtNDArray[n];
        PtNDArray[] expAvgSqs = new PtNDArray[n];
        PtNDArray[] steps = new PtNDArray[n];
        NDArray first = shards.get(0).master();
        // the kernel only reads a shard's step count (for the bias corrections), so one tensor serves all
        PtNDArray stepCount = (PtNDArray) temp.full(new Shape(), step, DataType.FLOAT32, first.getDevice());
        Map<Double, NDArray> decayFactors = new HashMap<>();
        for (int i = 0; i < n; i++) {
            ShardUpdate s = shards.get(i);
            NDArray master = s.master();
            NDArray g = s.grad().getDataType() == master.getDataType() ? s.grad()
                    : FlatTensors.own(s.grad().toType(master.getDataType(), true), temp);
            if (s.weightDecay() != 0) {
                NDArray factor = decayFactors.computeIfAbsent(s.weightDecay(),
                        wd -> UpdateRule.decayFactor(master, decoupled, lr, wd, temp));
                g = UpdateRule.decay(master, g, decoupled, factor, temp);
            }
            params[i] = (PtNDArray) master;
            grads[i] = (PtNDArray) g;
            expAvgs[i] = (PtNDArray) s.state().get(0);
            expAvgSqs[i] = (PtNDArray) s.state().get(1);
            steps[i] = stepCount;
        }
        try (NDManager host = temp.newSubManager(Device.cpu());
             IValue paramList = IValue.listFrom(params);
             IValue gradList = IValue.listFrom(grads);
             IValue expAvgList = IValue.listFrom(expAvgs);
             IValue expAvgSqList = IValue.listFrom(expAvgSqs);
             IValue stepList = IValue.listFrom(steps);
             IValue hyper = IValue.from((PtNDArray) host.create(new double[] {lr, beta1, beta2, eps}))) {
            // lists built here straight from the tensors' handles: no renamed handle per tensor, as
            // DJL's NDList route ("x[]" names) would need
            kernel.forward(paramList, gradList, expAvgList, expAvgSqList, stepList, hyper).close();
        }
    }
}
