package io.mcore4j.core;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.engine.PtSymbolBlock;
import ai.djl.pytorch.jni.IValue;
import ai.djl.pytorch.jni.IValueUtils;
import ai.djl.training.ParameterStore;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * A loaded TorchScript module without trainable parameters of its own (obtained from
 * {@link TorchScriptModules#load}); it belongs to the manager it was loaded on and is closed with it.
 * Two ways to call it: {@link #forward} for a module that maps tensors to tensors under autograd,
 * and {@link #call} for a kernel that works in place on tensors and lists of tensors.
 */
public final class TorchScriptModule {
    private final PtSymbolBlock block;
    private final ParameterStore noParameters;

    TorchScriptModule(PtSymbolBlock block, NDManager owner) {
        this.block = block;
        this.noParameters = new ParameterStore(owner, false);
        // DJL initialises a block on its first training call, without a lock (its input names and parameter map are
        // filled in then): threads sharing a module (in-JVM ranks) that make their first calls together corrupted
        // them. Initialised here, on the loading thread, no call initialises it again.
        block.initialize(owner, DataType.FLOAT32);
    }

    /** @return whether the block is initialised, so that no call initialises it (always true after loading) */
    boolean initialized() {
        return block.isInitialized();
    }

    /**
     * Runs the module's {@code forward} on tensors. Always DJL's training entry point: DJL runs an
     * evaluation call under libtorch's inference mode, whose outputs can never join autograd; the
     * thread's grad mode alone decides whether a graph is recorded.
     *
     * @param inputs the module's tensor arguments, in order
     * @return the outputs, owned by the inputs' manager; attach them where they belong
     */
    public NDList forward(NDList inputs) {
        return block.forward(noParameters, inputs, true);
    }

    /**
     * Runs the module's {@code forward} for its effect (a kernel that updates its arguments in
     * place) and discards its result. Each argument is a tensor or a list of tensors; the lists are
     * built straight from the tensors' handles.
     *
     * @param args the arguments, in order
     */
    public void call(Arg... args) {
        List<IValue> values = new ArrayList<>(args.length);
        try {
            for (Arg a : args) {
                values.add(toValue(a));
            }
            block.forward(values.toArray(new IValue[0])).close();
        } finally {
            for (IValue v : values) {
                v.close();
            }
        }
    }

    /**
     * Runs an exported method of the module on tensors through DJL's training entry point (the
     * thread's grad mode decides whether a graph is recorded), like {@link #forward(NDList)}.
     *
     * @param marker a tensor named {@code "module_method:" + name} (the exported method's name), which
     *     DJL reads to pick the method and passes no further; inputs must carry no name
     *     ({@link Tensors#detach} gives an unnamed handle)
     * @param inputs the method's tensor arguments, in order
     * @return the outputs, owned by the first input's manager
     */
    public NDList forward(NDArray marker, NDArray... inputs) {
        NDList list = new NDList(inputs.length + 1);
        for (NDArray in : inputs) {
            list.add(in);
        }
        list.add(marker);
        return block.forward(noParameters, list, true);
    }

    /**
     * Runs the exported method {@code method} on one tensor and returns its integer result. The call
     * runs under libtorch's inference mode: use it for methods that only inspect their argument.
     *
     * @param method the exported method's name
     * @param tensor its argument
     * @return the method's {@code int} result
     */
    long callForLong(String method, NDArray tensor) {
        try (IValue in = IValue.from((PtNDArray) tensor);
             IValue out = IValueUtils.runMethod(block, method, in)) {
            return out.toLong();
        }
    }

    /** One argument of {@link #call}: a tensor, or a list of tensors. */
    public sealed interface Arg {
        /**
         * @param tensor a PyTorch-engine tensor
         * @return the argument
         */
        static Arg tensor(NDArray tensor) {
            return new Single(Objects.requireNonNull(tensor, "tensor"));
        }

        /**
         * @param tensors PyTorch-engine tensors, in order
         * @return the argument, a TorchScript {@code List[Tensor]}
         */
        static Arg list(List<? extends NDArray> tensors) {
            return new Many(List.copyOf(tensors));
        }
    }

    private record Single(NDArray tensor) implements Arg {}

    private record Many(List<NDArray> tensors) implements Arg {}

    /** The native value of an argument; the caller closes it. */
    private static IValue toValue(Arg arg) {
        if (arg instanceof Single single) {
            return IValue.from((PtNDArray) single.tensor());
        }
        List<NDArray> tensors = ((Many) arg).tensors();
        PtNDArray[] array = new PtNDArray[tensors.size()];
        for (int i = 0; i < array.length; i++) {
            array[i] = (PtNDArray) tensors.get(i);
        }
        return IValue.listFrom(array);
    }
}
