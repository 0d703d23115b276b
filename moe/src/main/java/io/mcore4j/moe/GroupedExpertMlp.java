package io.mcore4j.moe;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.TorchScriptModule;
import io.mcore4j.core.TorchScriptModules;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.tensorparallel.MlpActivation;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The local experts' whole MLP on grouped products as one autograd Function of the rows and the stacked weights and
 * biases: {@code y = act(x_e w1[e]^T + b1[e]) w2[e]^T + b2[e]} over each expert's rows, forward in one call of
 * {@code grouped_mlp.pt} and backward in one more ({@code scripts/make_grouped_mlp_modules.py}), which reads the
 * activation's input and output kept from forward (what libtorch's autograd keeps for the composed path). Where
 * {@link LocalExperts}' composed grouped path makes two grouped products of their own, a split, an add and a
 * concatenation per bias and the activation, and libtorch's autograd runs their backward node by node in a traversal
 * of its own (the rows arrive from a Function and leave into one), this is one node: the host's cost per layer pass of
 * the MoE layer, not the GPU's, was the step's on small shapes (issue 34's probe preset). The stacks of the weights
 * stay libtorch ops; their gradients' backward waits for the scope's next traversal
 * ({@link FunctionContext#deferInputGradients}) instead of running one of its own.
 *
 * <p>The same function as the composed path: the same products (libtorch's {@code _grouped_mm} with the weights as a
 * column-major view), each bias added to its expert's rows, libtorch's own derivative ops for the activations; each
 * weight's gradient one grouped product over the experts' rows, each bias's one grouped product against columns of
 * ones (float32 sums, no atomics). {@code grouped_mlp_loop.pt} is the same archive with one matmul per expert, for a
 * libtorch without the grouped kernel (the CPU tests run the Function through it). Nothing here reads the device: the
 * group ends stay on it.
 *
 * <p>Thread-safe: the process shares one instance per archive and activation.
 */
final class GroupedExpertMlp implements Function {
    private static final Logger LOG = LoggerFactory.getLogger(GroupedExpertMlp.class);
    static final String KERNEL = "/io/mcore4j/moe/grouped_mlp.pt";
    static final String LOOP = "/io/mcore4j/moe/grouped_mlp_loop.pt";
    /** {@code -Dmcore4j.moe.fusedExpertMlp=false} leaves the composed grouped path on (for comparisons). */
    static final String PROPERTY = "mcore4j.moe.fusedExpertMlp";
    private static final Map<String, GroupedExpertMlp> SHARED = new ConcurrentHashMap<>();
    private static volatile boolean loggedOff;

    private final TorchScriptModule module;
    private final MlpActivation activation;
    private final String resource;

    private GroupedExpertMlp(TorchScriptModule module, MlpActivation activation, String resource) {
        this.module = module;
        this.activation = activation;
        this.resource = resource;
    }

    /**
     * The MLP on libtorch's grouped kernel, or null where this libtorch has none (before 2.8) or the property turns it
     * off; either is said once in the log.
     *
     * @param activation the experts' activation
     * @return the shared instance, or null
     */
    static GroupedExpertMlp kernel(MlpActivation activation) {
        if (!Boolean.parseBoolean(System.getProperty(PROPERTY, "true"))) {
            logOff("-D" + PROPERTY + "=false");
            return null;
        }
        try {
            return shared(KERNEL, activation);
        } catch (RuntimeException e) {
            logOff("its archive does not load on this libtorch (" + e.getMessage() + ")");
            return null;
        }
    }

    /**
     * The MLP with one matmul per expert, on any libtorch.
     *
     * @param activation the experts' activation
     * @return the shared instance
     */
    static GroupedExpertMlp loop(MlpActivation activation) {
        return shared(LOOP, activation);
    }

    private static GroupedExpertMlp shared(String resource, MlpActivation activation) {
        return SHARED.computeIfAbsent(resource + "#" + activation, k -> new GroupedExpertMlp(
                TorchScriptModules.shared(GroupedExpertMlp.class, resource), activation, resource));
    }

    private static void logOff(String why) {
        if (!loggedOff) {
            loggedOff = true;
            LOG.info("the local experts' fused grouped MLP is off: {}; the grouped products run one by one", why);
        }
    }

    /**
     * Applies the MLP.
     *
     * @param scope the pass's scope; owns the output
     * @param x {@code [N, h]}, the rows of expert 0, then 1, ... ({@code N > 0})
     * @param w1 {@code [E, f1, h]} the stacked fc1 weights (a stack of parameters, or a recorded function's output:
     *           the backward of the weights' and biases' gradients waits for the scope's next traversal)
     * @param b1 {@code [E, f1]} the stacked fc1 biases, or null
     * @param w2 {@code [E, h, f]} the stacked fc2 weights
     * @param b2 {@code [E, h]} the stacked fc2 biases to add here, or null
     * @param ends the running sums of {@code counts} as int32 on the rows' device
     * @param counts rows per expert
     * @return {@code [N, h]}
     */
    NDArray apply(AutogradScope scope, NDArray x, NDArray w1, NDArray b1, NDArray w2, NDArray b2, NDArray ends,
                  long[] counts) {
        NDArray countsOnHost = Host.INSTANCE.counts(counts, scope.manager());
        return scope.apply1(this, x, w1, w2, b1 != null ? b1 : Host.INSTANCE.none, b2 != null ? b2 : Host.INSTANCE.none,
                ends, countsOnHost, Host.INSTANCE.options(activation, b1 != null, b2 != null, true));
    }

    /** inputs: x, w1, w2, b1 (or none), b2 (or none), ends, counts on the host, options on the host */
    @Override
    public NDArray[] forward(FunctionContext ctx, NDArray... in) {
        NDList out = module.forward(new NDList(in[0], in[1], in[3], in[2], in[4], in[5], in[6], in[7]));
        out.attach(ctx.manager());
        // stacks of parameters: their backward joins the scope's next traversal instead of running one of its own
        ctx.deferInputGradients(1, 2, 3, 4);
        ctx.saveForBackward(in[0], out.get(1), out.get(2), in[1], in[2], in[5], in[6], in[7]);
        return new NDArray[] {out.get(0)};
    }

    @Override
    public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
        NDArray options = ctx.saved(7);
        boolean b1 = ctx.needsInputGrad(3);
        boolean b2 = ctx.needsInputGrad(4);
        if (!ctx.needsInputGrad(0)) {
            long[] o = options.toLongArray(); // a host tensor: no wait for the device
            options = Host.INSTANCE.options(activation, o[1] != 0, o[2] != 0, false);
        }
        NDList d = module.forward(Host.INSTANCE.backward, grads[0], ctx.saved(0), ctx.saved(1), ctx.saved(2),
                ctx.saved(3), ctx.saved(4), ctx.saved(5), ctx.saved(6), options);
        d.attach(ctx.manager());
        return new NDArray[] {ctx.needsInputGrad(0) ? d.get(0) : null, ctx.needsInputGrad(1) ? d.get(1) : null,
                ctx.needsInputGrad(2) ? d.get(3) : null, b1 ? d.get(2) : null, b2 ? d.get(4) : null, null, null, null};
    }

    @Override
    public String name() {
        return "moe-grouped-expert-mlp(" + resource.substring(resource.lastIndexOf('/') + 1) + ", " + activation + ")";
    }

    /** The host tensors the calls read: the absent bias, the method marker, the options per kind of call. */
    private static final class Host {
        static final Host INSTANCE = new Host();
        final NDManager manager = Mcore4j.newRootManager().newSubManager(Device.cpu());
        final NDArray none = manager.zeros(new Shape(0), DataType.FLOAT32);
        final NDArray backward = TorchScriptModules.methodMarker(manager, "backward");
        private final Map<Long, NDArray> options = new ConcurrentHashMap<>();

        /** {@code [activation code, fc1 bias, fc2 bias, input gradient]}, as the archive reads them. */
        NDArray options(MlpActivation activation, boolean b1, boolean b2, boolean dx) {
            long code = switch (activation) {
                case GELU -> 0;
                case GELU_TANH -> 1;
                case SWIGLU -> 2;
                case GEGLU_TANH -> 3;
            };
            long key = code * 8 + (b1 ? 4 : 0) + (b2 ? 2 : 0) + (dx ? 1 : 0);
            return options.computeIfAbsent(key, k -> manager.create(new long[] {code, b1 ? 1 : 0, b2 ? 1 : 0,
                    dx ? 1 : 0}));
        }

        /** The counts as a host int64 tensor owned by {@code owner}'s host sub-manager. */
        NDArray counts(long[] counts, NDManager owner) {
            NDArray out = manager.create(counts);
            out.attach(owner);
            return out;
        }
    }
}
