package io.mcore4j.moe;

import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import io.mcore4j.core.autograd.AutogradScope;

import java.util.HashMap;
import java.util.Map;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Routing, token dropping, padding and the auxiliary losses against Megatron-LM's own {@code moe_utils}
 * functions (routing.json, written by scripts/megatron-fixtures/generate.py): for three logit sets (with
 * ties, smooth, all equal), softmax / pre-softmax / sigmoid scores, top-1..3, four capacity factors, both
 * drop policies, with and without padding, the routing map and the final (dropped or padded) map must be
 * Megatron's exactly, and the probabilities and losses equal to float32 rounding.
 */
class MegatronRoutingTest {
    private static JsonObject fixture;

    @BeforeAll
    static void load() {
        fixture = MegatronFixtures.read("routing.json");
    }

    private static NDArray logits(NDManager m, String name) {
        return MegatronFixtures.matrix(m, fixture.getAsJsonObject("logit_sets").getAsJsonArray(name));
    }

    @Test
    void routingDroppingAndPaddingSelectMegatronsTokens() {
        int cases = 0;
        int droppings = 0;
        try (NDManager m = NDManager.newBaseManager(); AutogradScope scope = AutogradScope.open(m)) {
            Map<String, NDArray> logits = new HashMap<>();
            for (JsonElement e : fixture.getAsJsonArray("cases")) {
                JsonObject c = e.getAsJsonObject();
                String where = c.get("logits").getAsString() + " " + c.get("score").getAsString()
                        + (c.get("pre_softmax").getAsBoolean() ? " pre-softmax" : "") + " top-" + c.get("topk").getAsInt();
                NDArray x = logits.computeIfAbsent(c.get("logits").getAsString(), n -> logits(m, n));
                int k = c.get("topk").getAsInt();
                MoeConfig.RouterScore score = MoeConfig.RouterScore.valueOf(c.get("score").getAsString().toUpperCase(java.util.Locale.ROOT));
                TopKRouting.Selection s = TopKRouting.select(scope, x, k, score, c.get("pre_softmax").getAsBoolean(), null);
                assertEquals(MegatronFixtures.bits(c.getAsJsonArray("routing_map")), MegatronFixtures.bits(s.routingMap()),
                        where + " routing map");
                float[] probs = s.probs().toFloatArray();
                JsonArray expected = c.getAsJsonArray("probs");
                int experts = (int) x.getShape().get(1);
                for (int t = 0; t < expected.size(); t++) {
                    for (int j = 0; j < experts; j++) {
                        assertEquals(expected.get(t).getAsJsonArray().get(j).getAsDouble(), probs[t * experts + j], 2e-7,
                                where + " probs[" + t + "][" + j + "]");
                    }
                }
                long tokens = x.getShape().get(0);
                for (JsonElement de : c.getAsJsonArray("dropping")) {
                    JsonObject d = de.getAsJsonObject();
                    double factor = d.get("capacity_factor").getAsDouble();
                    MoeConfig.DropPolicy policy = MoeConfig.DropPolicy.valueOf(d.get("drop_policy").getAsString().toUpperCase(java.util.Locale.ROOT));
                    boolean pad = d.get("pad").getAsBoolean();
                    String drop = where + " factor " + factor + " " + policy + (pad ? " padded" : "");
                    long capacity = TokenDropping.capacity(tokens, k, experts, factor);
                    assertEquals(Math.min(d.get("capacity").getAsLong(), tokens), capacity, drop + " capacity");
                    NDArray mask = TokenDropping.capacityMask(s.probs(), s.routingMap(), capacity, policy, scope.manager());
                    NDArray finalMap = pad ? mask : s.routingMap().mul(mask);
                    assertEquals(MegatronFixtures.bits(d.getAsJsonArray("final_map")), MegatronFixtures.bits(finalMap),
                            drop + " final map");
                    droppings++;
                }
                cases++;
            }
        }
        assertEquals(3 * 3 * 3, cases);
        assertEquals(cases * 4 * 2 * 2, droppings);
    }

    @Test
    void auxAndZLossesEqualMegatrons() {
        try (NDManager m = NDManager.newBaseManager(); AutogradScope scope = AutogradScope.open(m)) {
            NDArray smooth = logits(m, "smooth");
            long tokens = smooth.getShape().get(0);
            int experts = (int) smooth.getShape().get(1);
            int checked = 0;
            for (JsonElement e : fixture.getAsJsonArray("losses")) {
                JsonObject c = e.getAsJsonObject();
                int k = c.get("topk").getAsInt();
                double coeff = c.get("coeff").getAsDouble();
                MoeConfig.RouterScore score = MoeConfig.RouterScore.valueOf(c.get("score").getAsString().toUpperCase(java.util.Locale.ROOT));
                String where = score + " top-" + k;
                NDArray scores = TopKRouting.scoresForAuxLoss(scope, smooth, score);
                NDArray map = TopKRouting.routingMapForAuxLoss(m, scores, k);
                NDArray counts = map.sum(new int[] {0});
                JsonArray expectedCounts = c.getAsJsonArray("tokens_per_expert");
                float[] actualCounts = counts.toFloatArray();
                for (int j = 0; j < experts; j++) {
                    assertEquals(expectedCounts.get(j).getAsDouble(), actualCounts[j], where + " tokens of expert " + j);
                }
                double aux = LoadBalancingLoss.switchLoss(scores, counts, tokens, k, experts, coeff, m).getFloat();
                assertEquals(c.get("aux_loss").getAsDouble(), aux, 1e-6 * Math.abs(aux), where + " aux loss");
                int seq = c.get("sequence_length").getAsInt();
                int batch = c.get("batch").getAsInt();
                NDArray seqScores = scores.reshape(seq, (long) batch * experts);
                NDArray seqCounts = map.reshape(seq, (long) batch * experts).sum(new int[] {0});
                double seqAux = LoadBalancingLoss.switchLoss(seqScores, seqCounts, seq, k, experts, coeff, m).getFloat() / batch;
                assertEquals(c.get("seq_aux_loss").getAsDouble(), seqAux, 1e-6 * Math.abs(seqAux), where + " sequence aux loss");
                checked++;
            }
            assertEquals(6, checked);
            for (JsonElement e : fixture.getAsJsonArray("z_loss")) {
                JsonObject c = e.getAsJsonObject();
                NDArray x = logits(m, c.get("logits").getAsString());
                double z = LoadBalancingLoss.zLoss(x, c.get("coeff").getAsDouble(), m).getFloat();
                assertEquals(c.get("z_loss").getAsDouble(), z, 1e-6 * Math.max(1e-3, Math.abs(z)), c.get("logits").getAsString() + " z-loss");
            }
        }
    }
}
