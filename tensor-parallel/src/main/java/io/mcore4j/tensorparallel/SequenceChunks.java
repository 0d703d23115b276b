package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;

import java.util.List;

/**
 * How the overlapped sequence-parallel linears ({@link PipelinedGatherLinear},
 * {@link PipelinedLinearReduceScatter}) cut the sequence (dim 0) into pieces that travel one
 * collective each. With {@code t} ranks and {@code n} pieces per rank the full sequence is
 * {@code s = t·n·m} rows; rank {@code r}'s shard is rows {@code [r·n·m, (r+1)·n·m)} and its piece
 * {@code c} rows {@code r·n·m + c·m + [0, m)}. One all-gather of every rank's piece {@code c} (or one
 * reduce-scatter of {@code t·m} rows) moves the rows {@code (r, c)} for all {@code r}, which are not
 * adjacent in the full sequence: {@link #rows} picks them out of a full tensor and
 * {@link #interleave} puts per-piece results back in sequence order.
 */
final class SequenceChunks {
    private SequenceChunks() {}

    /**
     * The pieces per rank: the largest count up to the group size that divides the shard, so that
     * with {@code n = t} the communication of all but the first piece can hide behind a GEMM.
     *
     * @param shardRows rows of one rank's sequence shard ({@code s / t})
     * @param ranks the tensor-parallel size {@code t}
     * @return {@code n}, between 1 and {@code ranks}
     */
    static int pieces(long shardRows, int ranks) {
        for (int n = ranks; n > 1; n--) {
            if (shardRows % n == 0) {
                return n;
            }
        }
        return 1;
    }

    /**
     * Piece {@code c} of a rank's shard: a view of its rows {@code [c·m, (c+1)·m)} (contiguous when
     * the shard is).
     */
    static NDArray piece(NDArray shard, int pieces, int c) {
        return pieces == 1 ? shard : Tensors.chunk(shard, 0, pieces, c);
    }

    /**
     * The rows {@code (r, c)} of a full-sequence tensor for every rank {@code r}, in rank order: the
     * rows one collective of piece {@code c} moves. A contiguous copy owned by {@code owner}, or
     * {@code full} itself when there is one piece.
     *
     * @param full {@code [t·n·m, ...]}
     * @param ranks {@code t}
     * @param pieces {@code n}
     * @param c the piece
     * @param owner owns the copy
     * @return {@code [t·m, ...]}
     */
    static NDArray rows(NDArray full, int ranks, int pieces, int c, NDManager owner) {
        if (pieces == 1) {
            return full;
        }
        Shape shape = full.getShape();
        long m = shape.get(0) / ((long) ranks * pieces);
        try (NDManager temp = owner.newSubManager()) {
            NDArray grouped = full.reshape(ranks, pieces, -1);
            grouped.attach(temp);
            NDArray picked = Tensors.narrow(grouped, 1, c, c + 1);
            picked.attach(temp);
            // the picked rows are strided in the full tensor, so the reshape copies them (contiguous)
            NDArray out = picked.reshape(new Shape(ranks * m).addAll(shape.slice(1)));
            out.attach(owner);
            return out;
        }
    }

    /**
     * The inverse of {@link #rows}: per-piece tensors of rows {@code (r, c)} for every {@code r}
     * put back in sequence order (one copy), or the only piece itself.
     *
     * @param perPiece {@code n} tensors {@code [t·m, ...]}, piece order
     * @param ranks {@code t}
     * @param owner owns the result
     * @return {@code [t·n·m, ...]}
     */
    static NDArray interleave(List<NDArray> perPiece, int ranks, NDManager owner) {
        if (perPiece.size() == 1) {
            return perPiece.get(0);
        }
        Shape pieceShape = perPiece.get(0).getShape();
        try (NDManager temp = owner.newSubManager()) {
            NDList grouped = new NDList(perPiece.size());
            for (NDArray p : perPiece) {
                NDArray g = p.reshape(ranks, -1);
                g.attach(temp);
                grouped.add(g);
            }
            NDArray stacked = NDArrays.stack(grouped, 1);
            stacked.attach(temp);
            NDArray out = stacked.reshape(new Shape(pieceShape.get(0) * perPiece.size()).addAll(pieceShape.slice(1)));
            out.attach(owner);
            return out;
        }
    }

    /**
     * Concatenates this rank's pieces, each {@code [m, ...]}, into its shard {@code [n·m, ...]}, or
     * returns the only piece.
     */
    static NDArray concat(List<NDArray> pieces, NDManager owner) {
        if (pieces.size() == 1) {
            return pieces.get(0);
        }
        NDArray out = NDArrays.concat(new NDList(pieces), 0);
        out.attach(owner);
        return out;
    }
}
