package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.ReduceOp;

import java.util.Objects;

/**
 * The communicators one MoE layer uses, taken from the rank's {@link ProcessGroups}: the dense
 * tensor-parallel, context-parallel and TP x DP groups (router statistics) and the expert groups
 * (EP, expert-TP, expert-DP). Reductions over TP x CP and TP x DP x CP run as two all-reduces
 * (their groups are products of those named in {@link ProcessGroups}), which sum the same values.
 *
 * @param tp dense tensor-parallel group
 * @param cp context-parallel group
 * @param tpDp dense TP x DP group
 * @param dpCp dense DP x CP group (ranks holding copies of the same dense weights)
 * @param ep expert-parallel group
 * @param expertTp tensor-parallel group inside experts
 * @param expertDp expert-data-parallel group
 */
record MoeGroups(Communicator tp, Communicator cp, Communicator tpDp, Communicator dpCp, Communicator ep,
                 Communicator expertTp, Communicator expertDp) {

    MoeGroups {
        Objects.requireNonNull(tp, "tp");
        Objects.requireNonNull(cp, "cp");
        Objects.requireNonNull(tpDp, "tpDp");
        Objects.requireNonNull(dpCp, "dpCp");
        Objects.requireNonNull(ep, "ep");
        Objects.requireNonNull(expertTp, "expertTp");
        Objects.requireNonNull(expertDp, "expertDp");
    }

    static MoeGroups of(ProcessGroups groups) {
        return new MoeGroups(groups.tp(), groups.cp(), groups.tpDp(), groups.dpCp(), groups.ep(), groups.expertTp(),
                groups.expertDp());
    }

    /** @return ranks whose tokens form one micro-batch's sequences: TP x CP */
    int tpCpSize() {
        return tp.size() * cp.size();
    }

    /** @return ranks of one pipeline stage: TP x DP x CP */
    int tpDpCpSize() {
        return tpDp.size() * cp.size();
    }

    /** @return whether this rank holds a copy of the dense weights that another DP or CP rank writes */
    boolean isDenseDataParallelReplica() {
        return dpCp.rank() != 0;
    }

    /** Sum over TP x CP; returns {@code x} itself when both groups have one rank. */
    NDArray allReduceTpCp(NDArray x, NDManager owner) {
        return sumOver(cp, sumOver(tp, x, owner), owner);
    }

    /** Sum over TP x DP x CP; returns {@code x} itself when all three groups have one rank. */
    NDArray allReduceTpDpCp(NDArray x, NDManager owner) {
        return sumOver(cp, sumOver(tpDp, x, owner), owner);
    }

    private static NDArray sumOver(Communicator c, NDArray x, NDManager owner) {
        return c.size() == 1 ? x : c.allReduce(x, ReduceOp.SUM, owner);
    }
}
