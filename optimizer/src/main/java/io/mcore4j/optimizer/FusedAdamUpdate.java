package io.mcore4j.optimizer;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.pytorch.engine.PtSymbolBlock;
import ai.djl.training.ParameterStore;
import io.mcore4j.core.TorchScriptModules;

import java.util.List;

/**
 * Adam or AdamW through libtorch's fused kernel: one pass over a bucket's master weights,
 * gradients and moments instead of about a dozen elementwise passes. DJL has no API for the kernel;
 * a TorchScript module that mcore4j generates ({@code scripts/make_fused_adam_module.py}) calls it.
 * The math is torch.optim.Adam's with the same bias corrections; weight decay (one value per call,
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
    private final ParameterStore noParameters;

    FusedAdamUpdate(double beta1, double beta2, double eps, boolean decoupled, NDManager owner) {
        this.beta1 = beta1;
        this.beta2 = beta2;
        this.eps = eps;
        this.decoupled = decoupled;
        this.kernel = TorchScriptModules.load(owner, FusedAdamUpdate.class, RESOURCE);
        this.noParameters = new ParameterStore(owner, false);
    }

    @Override
    public List<String> stateNames() {
        return List.of("exp_avg", "exp_avg_sq");
    }

    @Override
    public void apply(NDArray master, NDArray grad, NDArray[] state, double lr, double weightDecay, long step,
                      NDManager temp) {
        NDArray g = grad.getDataType() == master.getDataType() ? grad : FlatTensors.own(grad.toType(master.getDataType(), true), temp);
        g = UpdateRule.decay(master, g, decoupled, lr, weightDecay, temp);
        NDArray stepCount = temp.full(new Shape(), step, DataType.FLOAT32, master.getDevice());
        try (NDManager host = temp.newSubManager(Device.cpu())) {
            NDArray hyper = host.create(new double[] {lr, beta1, beta2, eps});
            // DJL passes arrays named "x[]" as one list argument; new handles keep the state's own names
            NDList in = new NDList(listItem(master, "params[]", temp), listItem(g, "grads[]", temp),
                    listItem(state[0], "exp_avgs[]", temp), listItem(state[1], "exp_avg_sqs[]", temp),
                    listItem(stepCount, "steps[]", temp), hyper);
            kernel.forward(noParameters, in, false).close();
        }
    }

    /** A second handle to {@code tensor}'s storage, named as an element of a list argument. */
    private static NDArray listItem(NDArray tensor, String listName, NDManager temp) {
        NDArray handle = tensor.reshape(tensor.getShape());
        handle.attach(temp);
        handle.setName(listName);
        return handle;
    }
}
