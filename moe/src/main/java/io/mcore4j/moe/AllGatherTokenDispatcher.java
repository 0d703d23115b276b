package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.parallel.Communicator;

import java.util.Arrays;

/**
 * All-gather dispatch (Megatron-Core's {@code MoEAllGatherTokenDispatcher}): every rank of an
 * expert-TP x EP box gathers the box's tokens, probabilities and routing maps (over expert-TP, then
 * over EP), picks the pairs of its local experts and, after the experts ran, scatters their weighted
 * outputs back to token order and reduce-scatters over EP, then expert-TP. The reduce-scatter sums
 * both the contributions of the different experts and the partial sums of expert tensor
 * parallelism. In backward the gathers become reduce-scatters (every rank's gradient for the
 * gathered tokens and probabilities is partial) and the reduce-scatters all-gathers.
 *
 * <p>Communication volume is {@code T · EP · ETP} tokens per rank regardless of routing, and no
 * counts are exchanged, so there is no host synchronisation beyond the local permutation, and none at all where the
 * routing pads every expert to its capacity.
 */
final class AllGatherTokenDispatcher extends TokenDispatcher {
    AllGatherTokenDispatcher(MoeGroups groups, int numExperts, int topK, boolean permuteFusion) {
        super(groups, numExperts, topK, permuteFusion);
    }

    @Override
    Dispatched dispatch(AutogradScope scope, NDArray tokens, Routing routing) {
        NDManager m = scope.manager();
        NDArray allTokens = ExpertCommunication.allGather(scope, ep,
                ExpertCommunication.allGather(scope, expertTp, tokens));
        NDArray allProbs = ExpertCommunication.allGather(scope, ep,
                ExpertCommunication.allGather(scope, expertTp, routing.probs()));
        // both maps travel in one message; they carry no gradient
        NDArray maps = Tensors.own(NDArrays.concat(new NDList(routing.routingMap(), routing.keptMap()), 1), m);
        maps = gatherWithoutGradient(gatherWithoutGradient(maps, expertTp, m), ep, m);
        int from = firstLocalExpert;
        int to = firstLocalExpert + numLocalExperts;
        NDArray localMap = Tensors.own(Tensors.narrow(maps, 1, from, to), m);
        NDArray localKept = Tensors.own(Tensors.narrow(maps, 1, numExperts + from, numExperts + to), m);
        NDArray localProbs = Tensors.own(Tensors.narrow(allProbs, 1, from, to), m);
        // padded to capacity, each expert holds the same rows of every gathered rank: no counts to read
        long padded = routing.rowsPerExpert();
        long[] counts = null;
        NDArray ends = null;
        if (padded >= 0) {
            padded *= ep.size() * expertTp.size();
            counts = new long[numLocalExperts];
            Arrays.fill(counts, padded);
            ends = evenEnds(numLocalExperts, padded, m);
        }
        TokenPermutation permutation = TokenPermutation.of(localMap, m, permuteFusion, counts);
        NDArray expertInput = permutation.permute(allTokens, m);
        int slots = Math.min(topK, numLocalExperts);
        return new Rows(expertInput, permutation.tokensPerExpert(), ends, (s, expertOutput) -> {
            NDArray partial = permutation.combine(expertOutput, localKept, localProbs, slots, s);
            return ExpertCommunication.reduceScatter(s, expertTp, ExpertCommunication.reduceScatter(s, ep, partial));
        });
    }

    private static NDArray gatherWithoutGradient(NDArray x, Communicator group, NDManager owner) {
        return group.size() == 1 ? x : group.allGather(x, 0, owner);
    }

    @Override
    public String toString() {
        return "AllGatherTokenDispatcher{experts " + firstLocalExpert + ".." + (firstLocalExpert + numLocalExperts - 1)
                + " of " + numExperts + ", ep " + ep.group().key() + ", expert-tp " + expertTp.group().key() + "}";
    }
}
