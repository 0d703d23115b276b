package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.nn.Activation;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.jni.JniUtils;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;

import java.util.ArrayList;
import java.util.List;

/**
 * Serial (single-rank) references built from plain DJL ops on full weights, in float32: values and
 * the gradients of every leaf, computed by libtorch autograd.
 */
final class SerialReference {
    private SerialReference() {}

    /** Output and gradients of {@code y = gelu(x W1ᵀ + b1) W2ᵀ + b2} for upstream gradient {@code g}. */
    record Mlp(NDArray y, NDArray dx, NDArray dw1, NDArray db1, NDArray dw2, NDArray db2) {}

    static Mlp mlp(NDManager owner, NDArray x, NDArray w1, NDArray b1, NDArray w2, NDArray b2, NDArray g) {
        List<NDArray> leaves = leaves(owner, x, w1, b1, w2, b2);
        try (AutogradScope scope = AutogradScope.open(owner)) {
            NDArray y = mlpForward(leaves.get(0), leaves.get(1), leaves.get(2), leaves.get(3), leaves.get(4));
            scope.backward(new NDArray[] {y}, new NDArray[] {f32(g, scope.manager())});
            NDArray out = Tensors.detach(y, owner);
            return new Mlp(out, grad(leaves.get(0), owner), grad(leaves.get(1), owner), grad(leaves.get(2), owner),
                    grad(leaves.get(3), owner), grad(leaves.get(4), owner));
        }
    }

    static NDArray mlpForward(NDArray x, NDArray w1, NDArray b1, NDArray w2, NDArray b2) {
        NDArray h = Activation.gelu(JniUtils.linear((PtNDArray) x, (PtNDArray) w1, (PtNDArray) b1));
        return JniUtils.linear((PtNDArray) h, (PtNDArray) w2, (PtNDArray) b2);
    }

    /** Mean cross-entropy over all tokens of {@code logits [s, b, V]} against {@code target [s, b]}. */
    static NDArray meanCrossEntropy(NDArray logits, NDArray target) {
        NDArray logp = logits.logSoftmax(-1);
        NDArray picked = logp.gather(target.toType(DataType.INT64, false).expandDims(-1), -1).squeeze(-1);
        return picked.neg().mean();
    }

    /** Copies of {@code sources} in float32 that require grad, owned by {@code owner}. */
    static List<NDArray> leaves(NDManager owner, NDArray... sources) {
        List<NDArray> out = new ArrayList<>();
        for (NDArray s : sources) {
            NDArray leaf = f32(s, owner);
            leaf.setRequiresGradient(true);
            out.add(leaf);
        }
        return out;
    }

    static NDArray f32(NDArray a, NDManager owner) {
        NDArray c = a.toType(DataType.FLOAT32, true);
        c.attach(owner);
        return c;
    }

    static NDArray grad(NDArray leaf, NDManager owner) {
        return Fixtures.grad(leaf, owner);
    }
}
