package io.mcore4j.moe;

import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.mcore4j.core.autograd.AutogradScope;

import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
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
    static void load() throws IOException {
        try (InputStream in = MegatronRoutingTest.class.getResourceAsStream("/megatron/routing.json")) {
            fixture = JsonParser.parseReader(new InputStreamReader(in, StandardCharsets.UTF_8)).getAsJsonObject();
        }
    }

    private static NDArray logits(NDManager m, String name) {
        JsonArray rows = fixture.getAsJsonObject("logit_sets").getAsJsonArray(name);
        int tokens = rows.size();
        int experts = rows.get(0).getAsJsonArray().size();
        float[] values = new float[tokens * experts];
        for (int t = 0; t < tokens; t++) {
            for (int e = 0; e < experts; e++) {
                values[t * experts + e] = rows.get(t).getAsJsonArray().get(e).getAsFloat();
            }
        }
        return m.create(values, new Shape(tokens, experts));
    }

    private static String[] bits(NDArray map) {
        long tokens = map.getShape().get(0);
        int experts = (int) map.getShape().get(1);
        float[] v = map.toFloatArray();
        String[] out = new String[(int) tokens];
        for (int t = 0; t < tokens; t++) {
            StringBuilder row = new StringBuilder();
            for (int e = 0; e < experts; e++) {
                row.append(v[t * experts + e] != 0 ? '1' : '0');
            }
            out[t] = row.toString();
        }
        return out;
    }

    private static String[] strings(JsonArray a) {
        String[] out = new String[a.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = a.get(i).getAsString();
        }
        return out;
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
                assertEquals(String.join("\n", strings(c.getAsJsonArray("routing_map"))), String.join("\n", bits(s.routingMap())),
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
                    assertEquals(String.join("\n", strings(d.getAsJsonArray("final_map"))), String.join("\n", bits(finalMap)),
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
