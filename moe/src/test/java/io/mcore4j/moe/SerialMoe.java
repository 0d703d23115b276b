package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.nn.Activation;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.tensorparallel.MlpActivation;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;

/**
 * A dense, loop-free reference of one MoE layer on one rank, written independently of the layer:
 * every expert runs on every token, and each token's output is the sum over experts of a dense
 * {@code [T, E]} weight matrix (zero outside the selected, kept pairs) times that expert's output.
 * Selection and capacity are decided on the host from the logits' values. All tensor math is
 * recorded by libtorch autograd, so gradients of any scalar built from the result are references too.
 */
final class SerialMoe {
    private SerialMoe() {}

    /** Full (unsplit) weights of every expert; biases may be empty lists. */
    record Weights(NDArray router, List<NDArray> fc1, List<NDArray> fc2, List<NDArray> fc1Bias, List<NDArray> fc2Bias) {
        /** The weights of a layer built on a single rank (EP1, expert-TP1), by parameter identity. */
        static Weights of(MoeLayer layer) {
            List<NDArray> w1 = new ArrayList<>();
            List<NDArray> w2 = new ArrayList<>();
            List<NDArray> b1 = new ArrayList<>();
            List<NDArray> b2 = new ArrayList<>();
            for (int e = 0; e < layer.numLocalExperts(); e++) {
                List<Parameter> p = layer.expertParameters(e);
                w1.add(p.get(0).data());
                w2.add(p.get(1).data());
                if (p.size() > 2) {
                    b1.add(p.get(2).data());
                    b2.add(p.get(3).data());
                }
            }
            return new Weights(layer.router().weight().data(), w1, w2, b1, b2);
        }
    }

    /**
     * @param output {@code [T, h]}
     * @param auxLoss sum of the configured load-balancing and z-losses over these tokens (a scalar, zero when none)
     * @param kept {@code [T][E]} whether each pair was selected and kept
     */
    record Result(NDArray output, NDArray auxLoss, boolean[][] kept) {}

    /**
     * @param c the options (expert bias, jitter and global-loss accumulation are not modelled)
     * @param w the weights
     * @param x {@code [T, h]} tokens in sequence-major order
     * @param seq sequence length s ({@code T = s * b})
     * @param batch micro-batch size b
     * @param m owner of every result
     * @return output, auxiliary loss and kept pairs
     */
    static Result forward(MoeConfig c, Weights w, NDArray x, long seq, long batch, NDManager m) {
        int tokens = (int) x.getShape().get(0);
        int experts = c.numExperts();
        int k = c.topK();
        NDArray logits = own(x.matMul(w.router().transpose()), m);
        float[] lv = logits.toFloatArray();
        // every score function is monotonic in the logits, so the top-k of the logits is the selection
        boolean[][] selected = topK(lv, tokens, experts, k);
        NDArray mask = own(m.create(toFloats(selected), new Shape(tokens, experts)), m);
        NDArray probs;
        if (c.routerScore() == MoeConfig.RouterScore.SIGMOID) {
            NDArray s = own(Activation.sigmoid(logits).mul(mask), m);
            probs = k > 1 ? own(s.div(s.sum(new int[] {1}, true)), m) : s;
        } else if (c.preSoftmax()) {
            probs = own(logits.softmax(1).mul(mask), m);
        } else {
            NDArray max = own(logits.max(new int[] {1}, true).stopGradient(), m);
            NDArray e = own(logits.sub(max).exp().mul(mask), m);
            probs = own(e.div(e.sum(new int[] {1}, true)), m);
        }
        boolean[][] kept = selected;
        if (c.capacityFactor() > 0) {
            long capacity = Math.min((long) Math.ceil((double) tokens * k / experts * c.capacityFactor()), tokens);
            kept = keep(selected, probs, capacity, c.dropPolicy(), m);
            probs = own(probs.mul(m.create(toFloats(kept), new Shape(tokens, experts))), m);
        }
        NDArray out = null;
        for (int e = 0; e < experts; e++) {
            NDArray y = expert(c, w, e, x, m);
            NDArray term = own(y.mul(probs.get(":, " + e + ":" + (e + 1))), m);
            out = out == null ? term : own(out.add(term), m);
        }
        NDArray aux = own(m.zeros(new Shape()), m);
        NDArray scores;
        if (c.routerScore() == MoeConfig.RouterScore.SOFTMAX) {
            scores = own(logits.softmax(1), m);
        } else {
            NDArray s = own(Activation.sigmoid(logits), m);
            scores = own(s.div(s.sum(new int[] {1}, true)), m);
        }
        NDArray selectedTensor = mask;
        if (c.auxLossCoeff() > 0) {
            aux = own(aux.add(switchLoss(scores, selectedTensor.sum(new int[] {0}), tokens, k, experts, c.auxLossCoeff())), m);
        }
        if (c.globalAuxLossCoeff() > 0) {
            aux = own(aux.add(switchLoss(scores, selectedTensor.sum(new int[] {0}), tokens, k, experts,
                    c.globalAuxLossCoeff())), m);
        }
        if (c.seqAuxLossCoeff() > 0) {
            // one loss per sequence b over its s tokens, averaged over the batch
            NDArray total = null;
            for (long b = 0; b < batch; b++) {
                NDArray rows = m.arange(0, (int) seq, 1, DataType.INT64).mul(batch).add(b);
                NDArray sb = own(scores.get(new ai.djl.ndarray.index.NDIndex("{}", rows)), m);
                NDArray mb = own(selectedTensor.get(new ai.djl.ndarray.index.NDIndex("{}", rows)), m);
                NDArray term = switchLoss(sb, mb.sum(new int[] {0}), seq, k, experts, c.seqAuxLossCoeff());
                total = total == null ? own(term, m) : own(total.add(term), m);
            }
            aux = own(aux.add(scaled(total, 1.0 / batch, m)), m);
        }
        if (c.zLossCoeff() > 0) {
            NDArray max = own(logits.max(new int[] {1}, true).stopGradient(), m);
            NDArray lse = own(logits.sub(max).exp().sum(new int[] {1}).log().add(max.squeeze(1)), m);
            aux = own(aux.add(scaled(own(lse.mul(lse).mean(), m), c.zLossCoeff(), m)), m);
        }
        return new Result(out, aux, kept);
    }

    /** One expert's MLP on every token. */
    static NDArray expert(MoeConfig c, Weights w, int e, NDArray x, NDManager m) {
        NDArray h = own(x.matMul(w.fc1().get(e).transpose()), m);
        if (!w.fc1Bias().isEmpty()) {
            h = own(h.add(w.fc1Bias().get(e)), m);
        }
        if (c.activation() == MlpActivation.SWIGLU) {
            long f = h.getShape().get(1) / 2;
            NDArray gate = own(h.get(":, 0:" + f), m);
            NDArray up = own(h.get(":, " + f + ":"), m);
            h = own(gate.mul(Activation.sigmoid(gate)).mul(up), m);
        } else {
            h = own(Activation.gelu(h), m);
        }
        NDArray y = own(h.matMul(w.fc2().get(e).transpose()), m);
        if (!w.fc2Bias().isEmpty()) {
            y = own(y.add(w.fc2Bias().get(e)), m);
        }
        return y;
    }

    private static NDArray switchLoss(NDArray scores, NDArray counts, long tokens, int k, int experts, double coeff) {
        double factor = experts * coeff / ((double) k * tokens * tokens);
        return scaled(scores.sum(new int[] {0}).mul(counts).sum(), factor, scores.getManager());
    }

    /** The k largest values of each row (ties impossible with random data). */
    static boolean[][] topK(float[] values, int rows, int cols, int k) {
        boolean[][] out = new boolean[rows][cols];
        for (int t = 0; t < rows; t++) {
            Integer[] order = new Integer[cols];
            for (int e = 0; e < cols; e++) {
                order[e] = e;
            }
            final int row = t;
            Arrays.sort(order, Comparator.comparingDouble(e -> -values[row * cols + e]));
            for (int j = 0; j < k; j++) {
                out[t][order[j]] = true;
            }
        }
        return out;
    }

    /**
     * Per expert, the selected tokens it keeps: Megatron's unsorted libtorch top-k of the probabilities or of
     * the 0/1 map over each expert's column (the choice MegatronRoutingTest pins to Megatron's own output).
     */
    static boolean[][] keep(boolean[][] selected, NDArray probs, long capacity, MoeConfig.DropPolicy policy, NDManager m) {
        int tokens = selected.length;
        int experts = selected[0].length;
        NDArray map = own(m.create(toFloats(selected), new Shape(tokens, experts)), m);
        float[] mask = TokenDropping.capacityMask(probs, map, capacity, policy, m).toFloatArray();
        boolean[][] kept = new boolean[tokens][experts];
        for (int t = 0; t < tokens; t++) {
            for (int e = 0; e < experts; e++) {
                kept[t][e] = selected[t][e] && mask[t * experts + e] > 0;
            }
        }
        return kept;
    }

    static float[] toFloats(boolean[][] map) {
        float[] out = new float[map.length * map[0].length];
        for (int t = 0; t < map.length; t++) {
            for (int e = 0; e < map[t].length; e++) {
                out[t * map[t].length + e] = map[t][e] ? 1 : 0;
            }
        }
        return out;
    }

    /**
     * {@code x · factor} with the factor as a libtorch scalar: DJL's {@code mul(Number)} frees its
     * scalar's buffer while autograd still needs it (wrong gradients after a garbage collection).
     */
    static NDArray scaled(NDArray x, double factor, NDManager m) {
        return own(x.mul(m.full(new Shape(), (float) factor, x.getDataType())), m);
    }

    static NDArray own(NDArray x, NDManager m) {
        x.attach(m);
        return x;
    }

    /** Concatenates a list of tensors along dim 0 (owned by {@code m}). */
    static NDArray concat(List<NDArray> parts, NDManager m) {
        return own(ai.djl.ndarray.NDArrays.concat(new NDList(parts), 0), m);
    }
}
