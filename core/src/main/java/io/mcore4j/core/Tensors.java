package io.mcore4j.core;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.ndarray.types.SparseFormat;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.engine.PtNDManager;
import ai.djl.pytorch.jni.JniUtils;

import io.mcore4j.core.autograd.NoGrad;

import java.util.Arrays;

/**
 * Small tensor operations DJL lacks or spells awkwardly; each states which manager owns its result.
 * With {@link io.mcore4j.core.autograd.GradMode}, {@link TorchScriptModules} and
 * {@link TensorMemory} this is the facade over DJL's PyTorch-engine internals
 * ({@code ai.djl.pytorch.*}): no other mcore4j module imports them.
 */
public final class Tensors {
    private Tensors() {}

    /**
     * The gradient accumulated in {@code array}'s {@code .grad}, or {@code null} when autograd has
     * written none. Unlike {@link NDArray#getGradient()} this never fabricates a float32 zero tensor
     * and never leaves a handle in the array's own (often long-lived) manager.
     *
     * @param array a tensor that requires grad
     * @param owner the manager that will own the returned handle
     * @return a handle to the gradient owned by {@code owner}, or {@code null}
     */
    public static NDArray gradientOrNull(NDArray array, NDManager owner) {
        PtNDArray grad = JniUtils.getGradient((PtNDArray) array);
        if (grad != null) {
            grad.attach(owner);
        }
        return grad;
    }

    /**
     * The gradient of {@code array}, or zeros of its shape and dtype when none was written.
     *
     * @param array a tensor that requires grad
     * @param owner the manager that will own the returned array
     * @return never null
     */
    public static NDArray gradientOrZeros(NDArray array, NDManager owner) {
        NDArray grad = gradientOrNull(array, owner);
        return grad != null ? grad : DataTypes.zeros(owner, array.getShape(), DataTypes.of(array), array.getDevice());
    }

    /**
     * A new leaf over {@code leaf}'s storage, with no gradient, replacing {@code leaf}, which is
     * closed: the way to set a gradient to "none" (PyTorch's {@code param.grad = None}), which
     * libtorch offers through no API DJL reaches. The new leaf requires grad, lives in
     * {@code leaf}'s manager and shares its values, shape, dtype and version counter; views of the
     * old storage (checkpoint pieces) keep seeing the same values. The old leaf's {@code .grad} is
     * freed as soon as nothing refers to the old leaf (an autograd graph still holding it, or a view
     * taken with autograd, keeps it). A Java buffer the old handle borrowed on the CPU
     * ({@link TensorMemory#borrowsHostMemory}) moves to the new one, so that closing the old handle
     * does not let the garbage collector free the storage.
     *
     * <p>The next backward that reaches the new leaf gives it a gradient without adding into a
     * zeroed one: libtorch's {@code AccumulateGrad} takes the incoming gradient tensor itself when
     * nothing else refers to it (no kernel) and copies it otherwise.
     *
     * @param leaf a leaf that requires grad; closed by this call
     * @return the replacement leaf
     */
    public static NDArray renewLeaf(NDArray leaf) {
        PtNDArray old = (PtNDArray) leaf;
        PtNDArray fresh = JniUtils.detachGradient(old);
        JniUtils.attachGradient(fresh, true);
        TensorMemory.moveHostMemory(old, fresh);
        fresh.setName(old.getName());
        old.close();
        return fresh;
    }

    /**
     * Sets {@code array}'s accumulated gradient to zero in place (no-op if it has none).
     *
     * @param array a tensor that requires grad
     */
    public static void zeroGradient(NDArray array) {
        JniUtils.zeroGrad((PtNDArray) array);
    }

    /**
     * Whether {@code array} takes part in autograd: libtorch's {@code requires_grad()}, true for a
     * leaf that requires grad and for any tensor computed from one with grad mode on.
     *
     * <p>DJL exposes only "is a leaf that keeps {@code .grad}" and no safe {@code grad_fn} probe.
     * The probe used here never throws: {@code requires_grad_(true)} is a no-op on a non-leaf (it
     * already requires grad and keeps reporting "not a leaf"), while on a constant leaf it makes the
     * leaf report true, which is then undone. A throwing probe would cost a symbolised C++ backtrace
     * per call, because DJL formats every libtorch error with its backtrace.
     *
     * @param array any tensor
     * @return true if gradients flow through it
     */
    public static boolean requiresGrad(NDArray array) {
        if (!isFloating(DataTypes.of(array))) {
            return false;
        }
        PtNDArray pt = (PtNDArray) array;
        if (JniUtils.requiresGrad(pt)) {
            return true;
        }
        JniUtils.attachGradient(pt, true);
        if (JniUtils.requiresGrad(pt)) {
            // a leaf that did not require grad: put it back
            JniUtils.attachGradient(pt, false);
            return false;
        }
        return true;
    }

    /**
     * Moves {@code array} into {@code owner} and returns it. DJL attaches an op's result to its
     * first operand's manager, which may be long-lived (a parameter's, a caller's); code that
     * creates a temporary this way hands it to the manager that should free it.
     *
     * @param array a tensor
     * @param owner the manager that will own it
     * @return {@code array}
     */
    public static NDArray own(NDArray array, NDManager owner) {
        array.attach(owner);
        return array;
    }

    /**
     * {@code x * factor}, safe under autograd.
     *
     * <p>DJL's {@code mul(Number)} and {@code div(Number)} wrap the number in a tensor over a Java
     * buffer and close it at once, but libtorch keeps that operand for the backward of the product:
     * after a garbage collection the backward reads freed memory and the gradient is silently
     * wrong. Here the scalar is a libtorch-owned tensor that {@code owner} keeps until it closes
     * ({@link #scalar}, which also spares the host-to-device copy a number operand costs on a GPU).
     *
     * @param x any floating tensor
     * @param factor the scale
     * @param owner manager that owns the scalar and the result, e.g. the pass's scope manager
     * @return the scaled tensor
     */
    public static NDArray scale(NDArray x, double factor, NDManager owner) {
        NDArray out = x.mul(scalar(factor, x, owner));
        out.attach(owner);
        return out;
    }

    /**
     * A 0-dim tensor holding {@code value} in {@code like}'s dtype, filled on {@code like}'s device:
     * the operand to use instead of a Java number. DJL's number overloads ({@code mul(Number)},
     * {@code gte(Number)}, {@code sub(Number)}, ...) wrap the number in a tensor copied from host
     * memory; on a GPU that pageable copy waits for every kernel queued before it, a host
     * synchronisation per call. This one is a fill kernel, queued like any other op.
     *
     * @param value the number (rounded to {@code like}'s dtype)
     * @param like a tensor whose dtype and device the scalar takes
     * @param owner the manager that owns the scalar (a PyTorch-engine manager)
     * @return the scalar
     */
    public static NDArray scalar(double value, NDArray like, NDManager owner) {
        return JniUtils.full((PtNDManager) owner, new Shape(), value, scalarType(like), like.getDevice(), SparseFormat.DENSE);
    }

    /**
     * A 0-dim tensor holding {@code value} in {@code like}'s dtype in host memory, as the second operand of a binary
     * elementwise op on {@code like} wherever {@code like} lives: libtorch hands a host scalar's value to the device's
     * kernel as an argument (as it does a Python number), so the op on a contiguous tensor runs its vectorised
     * kernel, where a {@link #scalar} on the device is a broadcast operand, which libtorch runs through its generic
     * strided kernel (the 1.3B model's float32 gradient buckets at DP4: 26 divisions a step, 4.0 ms). Neither copies
     * nor waits. Only as an operand of such ops (not where both operands must share a device, as in a
     * concatenation), and, inside a captured CUDA graph, only for a value that stays the same over its replays.
     *
     * @param value the number (rounded to {@code like}'s dtype)
     * @param like the tensor the op runs on; the scalar takes its dtype (float32 for bfloat16, see {@link #scalar})
     * @param owner the manager that owns the scalar (a PyTorch-engine manager)
     * @return the scalar, on the host
     */
    public static NDArray hostScalar(double value, NDArray like, NDManager owner) {
        return JniUtils.full((PtNDManager) owner, new Shape(), value, scalarType(like), Device.cpu(), SparseFormat.DENSE);
    }

    private static DataType scalarType(NDArray like) {
        DataType dtype = like.getDataType();
        if (dtype == DataType.UNKNOWN && DataTypes.of(like) == DataType.BFLOAT16) {
            // DJL cannot create a bfloat16 scalar; a 0-dim float32 operand leaves a bfloat16 tensor's
            // dtype as it is under libtorch's type promotion (a dimensioned operand of the same
            // category decides), and the op rounds it to bfloat16 as a bfloat16 scalar would be
            return DataType.FLOAT32;
        }
        return dtype;
    }

    /**
     * A tensor of {@code data} on {@code owner}'s device, made without a host wait: DJL's
     * {@code owner.create(data, shape)} on a GPU manager copies from pageable host memory, which
     * CUDA runs only after every kernel queued before it while the host waits (at the start of a
     * training step, for the whole previous optimizer step). On a CUDA device the values are staged
     * in pinned memory and the copy is queued asynchronously ({@link PinnedCopy}); on the CPU this is
     * {@code owner.create(data, shape)}. The array may be reused as soon as this returns.
     *
     * @param data the values, row-major
     * @param shape their shape ({@code data.length} elements)
     * @param owner the manager that owns the result; its device is the target
     * @return an int32 tensor of {@code shape}
     * @throws IllegalArgumentException if the shape does not hold {@code data.length} elements
     */
    public static NDArray fromHost(int[] data, Shape shape, NDManager owner) {
        if (shape.size() != data.length) {
            throw new IllegalArgumentException("shape " + describe(shape) + " holds " + shape.size()
                    + " elements, got " + data.length + " values");
        }
        if (!owner.getDevice().isGpu()) {
            return owner.create(data, shape);
        }
        try (NDManager host = owner.newSubManager(Device.cpu())) {
            return PinnedCopy.get().toDevice(host.create(data, shape), owner);
        }
    }

    /**
     * {@code log softmax} over {@code axis}, computed and returned in {@code dtype} by libtorch's one
     * fused kernel: a float16 or bfloat16 input is widened inside the kernel, with no widened copy.
     *
     * @param x input of any floating dtype
     * @param axis the dimension normalised over
     * @param dtype the dtype of the computation and the result
     * @return a new tensor of {@code x}'s shape, owned by {@code x}'s manager
     */
    public static NDArray logSoftmax(NDArray x, int axis, DataType dtype) {
        return JniUtils.logSoftmax((PtNDArray) x, axis, dtype);
    }

    /**
     * {@code x · wᵀ + b} over the last dim of {@code x}, computed as one 2-D product so that the
     * bias is added inside the matrix multiply. For a 2-D input libtorch's {@code linear} always
     * calls {@code addmm}, whose CUDA path adds a contiguous 1-d bias in the GEMM epilogue
     * (cuBLASLt); given our {@code [s, b, h]} activations directly, libtorch 2.11 on an H200 ran the
     * product and then a separate broadcast add of the bias (measured with a CUPTI trace, four such
     * adds per transformer layer). The flattening here is a view whenever {@code x} is contiguous.
     *
     * @param x input {@code [.., in]}
     * @param w weight {@code [out, in]}
     * @param b bias {@code [out]}, or null
     * @param owner the manager that owns the result
     * @return {@code [.., out]}, recorded by autograd like libtorch's linear
     */
    public static NDArray linear(NDArray x, NDArray w, NDArray b, NDManager owner) {
        Shape shape = x.getShape();
        int n = shape.dimension();
        if (n <= 2 || b == null) {
            NDArray out = JniUtils.linear((PtNDArray) x, (PtNDArray) w, (PtNDArray) b);
            out.attach(owner);
            return out;
        }
        try (NDManager temp = owner.newSubManager()) {
            NDArray flat = x.reshape(-1, shape.get(n - 1));
            flat.attach(temp);
            NDArray product = JniUtils.linear((PtNDArray) flat, (PtNDArray) w, (PtNDArray) b);
            product.attach(temp);
            NDArray out = product.reshape(shape.slice(0, n - 1).add(w.getShape().get(0)));
            out.attach(owner);
            return out;
        }
    }

    /**
     * A new handle to the same storage, detached from the autograd graph, owned by {@code owner}.
     *
     * @param array any tensor
     * @param owner the manager that will own the new handle
     * @return a leaf that does not require grad
     */
    public static NDArray detach(NDArray array, NDManager owner) {
        NDArray detached = array.stopGradient();
        detached.attach(owner);
        return detached;
    }

    /**
     * Whether {@code dtype} is a floating-point type that autograd can differentiate.
     *
     * @param dtype a DJL data type
     * @return true for float16/32/64 (and bfloat16, which DJL's PyTorch engine cannot create)
     */
    public static boolean isFloating(DataType dtype) {
        return dtype == DataType.FLOAT32 || dtype == DataType.FLOAT16 || dtype == DataType.FLOAT64
                || dtype == DataType.BFLOAT16;
    }

    /**
     * Splits {@code array} into {@code parts} equal chunks along {@code dim} and returns chunk
     * {@code index}, owned by {@code array}'s manager.
     *
     * @param array the tensor to split
     * @param dim the tensor dim to split along
     * @param parts number of chunks; must divide the dim's size
     * @param index which chunk, 0-based
     * @return a view-backed chunk
     * @throws IllegalArgumentException if {@code parts} does not divide the dim
     */
    public static NDArray chunk(NDArray array, int dim, int parts, int index) {
        Shape shape = array.getShape();
        int d = dim < 0 ? dim + shape.dimension() : dim;
        long size = shape.get(d);
        if (size % parts != 0) {
            throw new IllegalArgumentException("dim " + d + " of shape " + shape + " has size " + size
                    + ", not divisible into " + parts + " equal chunks");
        }
        long len = size / parts;
        return JniUtils.slice((PtNDArray) array, d, index * len, (index + 1) * len, 1);
    }

    /**
     * The view of {@code array} along {@code dim} from {@code start} (inclusive) to {@code end}
     * (exclusive): libtorch's {@code narrow}/{@code slice}, shared storage, no copy, recorded by
     * autograd. Owned by {@code array}'s manager.
     *
     * @param array the tensor
     * @param dim the tensor dim (non-negative)
     * @param start first index
     * @param end one past the last index
     * @return the view
     */
    public static NDArray narrow(NDArray array, int dim, long start, long end) {
        return JniUtils.slice((PtNDArray) array, dim, start, end, 1);
    }

    /**
     * Splits {@code array} along {@code dim} into consecutive views of the given sizes (libtorch's
     * {@code split_with_sizes}), owned by {@code array}'s manager and recorded by autograd.
     *
     * @param array the tensor
     * @param sizes the size of each part along {@code dim}; they must add up to the dim's size
     * @param dim the tensor dim
     * @return one view per size, in order
     */
    public static NDList split(NDArray array, long[] sizes, int dim) {
        return JniUtils.split((PtNDArray) array, sizes, dim);
    }

    /**
     * Rows of {@code weight} picked by {@code ids} (libtorch's {@code embedding}, dense gradient),
     * owned by {@code ids}' manager.
     *
     * @param ids integer indices of any shape
     * @param weight the table {@code [rows, dim]}
     * @return {@code ids.shape + [dim]}
     */
    public static NDArray embedding(NDArray ids, NDArray weight) {
        return JniUtils.embedding((PtNDArray) ids, (PtNDArray) weight, false);
    }

    /**
     * Runs libtorch's backward from {@code root} with the upstream gradient {@code grad},
     * accumulating into the {@code .grad} of every leaf reached.
     *
     * @param root a tensor recorded by autograd (or a leaf that requires grad)
     * @param grad the gradient of the loss with respect to {@code root}, same shape
     * @param keepGraph whether the graph stays usable for another backward
     */
    public static void backward(NDArray root, NDArray grad, boolean keepGraph) {
        JniUtils.backward((PtNDArray) root, (PtNDArray) grad, keepGraph, false);
    }

    /**
     * Adds {@code grad} to the accumulated gradient of the leaf {@code leaf}, exactly as autograd
     * would at the end of a backward that reaches it (a backward from the leaf itself).
     *
     * @param leaf a leaf tensor that requires grad
     * @param grad a gradient of the leaf's shape
     */
    public static void accumulateGradient(NDArray leaf, NDArray grad) {
        backward(leaf, grad, false);
    }

    /**
     * Copies {@code source}'s values into {@code target} in place, keeping {@code target}'s
     * identity (and its requires-grad flag). Shapes must match; dtypes are converted in the same
     * copy (libtorch's {@code copy_}), with no converted temporary: a float16 gradient reaches a
     * float32 buffer, or a float32 master a float16 parameter, in one pass.
     *
     * @param target destination, written in place
     * @param source values to copy
     */
    public static void copyInto(NDArray target, NDArray source) {
        if (!target.getShape().equals(source.getShape())) {
            throw new IllegalArgumentException("cannot copy a tensor of shape " + source.getShape()
                    + " into one of shape " + target.getShape());
        }
        // an ellipsis index writes every element in place, keeping the target's storage; grad mode
        // goes off for the write (a leaf that requires grad refuses it otherwise), only if it is on
        try (NoGrad ignored = NoGrad.enter()) {
            target.set(new ai.djl.ndarray.index.NDIndex("..."), source);
        }
    }

    /**
     * Waits on the host until the device of {@code manager} has run the work queued so far: a one-element read back
     * to the host, which the device's stream orders after that work (for timing phases of a step on a GPU).
     *
     * @param manager a manager on the device to wait for
     */
    public static void awaitDevice(NDManager manager) {
        try (NDManager temp = manager.newSubManager()) {
            temp.zeros(new Shape(1)).toFloatArray();
        }
    }

    /**
     * Shape as a readable string with the dims in brackets, e.g. {@code [16, 32]}.
     *
     * @param shape a shape
     * @return the text
     */
    public static String describe(Shape shape) {
        return Arrays.toString(shape.getShape());
    }
}
