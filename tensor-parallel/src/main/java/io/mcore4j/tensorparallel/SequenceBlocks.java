package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.TorchScriptModule;
import io.mcore4j.core.TorchScriptModule.Arg;
import io.mcore4j.core.TorchScriptModules;
import io.mcore4j.core.Tensors;

import java.util.ArrayList;
import java.util.List;

/**
 * How the overlapped sequence-parallel linears ({@link PipelinedGatherLinear},
 * {@link PipelinedLinearReduceScatter}) cut the sequence (dim 0): with {@code t} ranks, rank {@code r}'s block is
 * rows {@code [r·m, (r+1)·m)} of the full sequence, {@code m = s/t}. Each computes its own block's product first,
 * while the other blocks travel, then the others'. A product is written straight into its rows of the tensor the
 * caller holds (libtorch's {@code out=} forms, {@code mm_into.pt} and {@code addmm_into.pt} from
 * {@code scripts/make_linear_into_modules.py}), so no block's product is copied into place.
 */
final class SequenceBlocks {
    private SequenceBlocks() {}

    /**
     * The rows {@code [from, to)} of {@code full} along dim 0: a view (contiguous when {@code full} is).
     *
     * @param full the tensor
     * @param from the first row
     * @param to one past the last row
     * @param owner owns the view's handle (the memory stays {@code full}'s)
     * @return the view
     */
    static NDArray rows(NDArray full, long from, long to, NDManager owner) {
        return Tensors.own(Tensors.narrow(full, 0, from, to), owner);
    }

    /**
     * The ranges of rows of a sequence of {@code t} blocks of {@code m} rows that are not block {@code r}, in
     * order: {@code [0, r·m)} and {@code [(r+1)·m, t·m)}, whichever are not empty.
     *
     * @param m rows per block
     * @param t the number of blocks
     * @param r the block left out
     * @return up to two {@code {from, to}} pairs
     */
    static List<long[]> others(long m, int t, int r) {
        List<long[]> ranges = new ArrayList<>(2);
        if (r > 0) {
            ranges.add(new long[] {0, r * m});
        }
        if (r < t - 1) {
            ranges.add(new long[] {(r + 1) * m, t * m});
        }
        return ranges;
    }

    /**
     * Writes {@code a·b} (plus {@code bias} in the GEMM's epilogue, when given) into {@code out}'s memory.
     *
     * @param out contiguous {@code [..., n]} (a view of rows of a larger tensor, say), as many rows as {@code a}
     * @param a {@code [..., k]}, contiguous
     * @param b {@code [k, n]} (a transposed weight view, say)
     * @param bias {@code [n]}, or null
     */
    static void productInto(NDArray out, NDArray a, NDArray b, NDArray bias) {
        if (bias == null) {
            module("mm_into.pt").call(Arg.tensor(out), Arg.tensor(a), Arg.tensor(b));
        } else {
            module("addmm_into.pt").call(Arg.tensor(out), Arg.tensor(bias), Arg.tensor(a), Arg.tensor(b));
        }
    }

    private static TorchScriptModule module(String name) {
        return TorchScriptModules.shared(SequenceBlocks.class, "/io/mcore4j/tensorparallel/" + name);
    }
}
