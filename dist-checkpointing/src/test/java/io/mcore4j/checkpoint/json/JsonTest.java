package io.mcore4j.checkpoint.json;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

class JsonTest {

    @Test
    void roundTripsEveryKindOfValue() {
        Map<String, Object> value = new LinkedHashMap<>();
        value.put("long", Long.MIN_VALUE);
        value.put("double", -1.25e-300);
        value.put("negativeZero", -0.0);
        value.put("third", 1.0 / 3);
        value.put("whole", 2.0);
        value.put("bool", false);
        value.put("null", null);
        value.put("text", "\"\\/\b\f\n\r\t\u0000\u001f é \u2603 \ud83d\ude00");
        value.put("list", Arrays.asList(1L, "x", null, List.of(), Map.of()));
        value.put("nested", Map.of("a", Map.of("b", List.of(List.of(1L, 2L)))));
        for (String text : List.of(Json.write(value), Json.writePretty(value))) {
            assertEquals(value, Json.parse(text), text);
        }
    }

    @Test
    void integersAndDecimalsKeepTheirKind() {
        assertEquals(List.of(3L, 3.0, 300.0, -5L), Json.parse("[3, 3.0, 3e2, -5]"));
        assertEquals(Long.valueOf(7), Json.parse(Json.write(7)));
        assertEquals(Double.valueOf(0.5f), Json.parse(Json.write(0.5f)));
    }

    @Test
    void outputIsDeterministicWithSortedKeys() {
        Map<String, Object> a = new HashMap<>();
        Map<String, Object> b = new TreeMap<>((x, y) -> y.compareTo(x));
        for (String k : List.of("zeta", "alpha", "mid", "Beta")) {
            a.put(k, k.length());
            b.put(k, k.length());
        }
        assertEquals("{\"Beta\":4,\"alpha\":5,\"mid\":3,\"zeta\":4}", Json.write(a));
        assertEquals(Json.writePretty(a), Json.writePretty(b));
        assertEquals("{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": [\n    {}\n  ]\n}",
                Json.writePretty(Map.of("b", List.of(Map.of()), "a", List.of(1, 2))));
    }

    @Test
    void textOfThePreviousWriterStillParses() {
        // checkpoints written before Gson: arrays of scalars on one line, ", " between their elements
        String old = "{\n  \"format\": \"mcore4j-dist-checkpoint\",\n  \"shards\": [\n    {\n      \"name\": \"w\",\n"
                + "      \"offset\": [0, 128],\n      \"scale\": 0.5\n    }\n  ],\n  \"version\": 1\n}";
        Map<String, Object> shard = new LinkedHashMap<>();
        shard.put("name", "w");
        shard.put("offset", List.of(0L, 128L));
        shard.put("scale", 0.5);
        Object value = Json.parse(old);
        assertEquals(Map.of("format", "mcore4j-dist-checkpoint", "shards", List.of(shard), "version", 1L), value);
        assertEquals(value, Json.parse(Json.writePretty(value)));
    }

    @Test
    void writerRefusesWhatJsonCannotHoldNamingThePath() {
        JsonException nan = assertThrows(JsonException.class, () -> Json.write(Map.of("s", List.of(1, Double.NaN))));
        assertTrue(nan.getMessage().startsWith("$.s[1]: NaN"), nan.getMessage());
        JsonException type = assertThrows(JsonException.class, () -> Json.write(Map.of("o", new Object())));
        assertTrue(type.getMessage().contains("$.o") && type.getMessage().contains("java.lang.Object"), type.getMessage());
        Map<Object, Object> intKey = new HashMap<>();
        intKey.put(1, 2);
        assertThrows(JsonException.class, () -> Json.write(intKey));
        List<Object> cycle = new ArrayList<>();
        cycle.add(cycle);
        assertTrue(assertThrows(JsonException.class, () -> Json.write(cycle)).getMessage().contains("nesting"));
    }

    @Test
    void loneSurrogatesAreEscapedSoTheTextStaysValid() {
        String s = "a\ud800b";
        assertEquals("\"a\\ud800b\"", Json.write(s));
        assertEquals(s, Json.parse(Json.write(s)));
    }

    // Gson (strict) finds the error; the column is where its reader stood, just past the offending text
    @ParameterizedTest
    @CsvSource(delimiter = '|', value = {
        "{\"a\": 1,}|1|10|Expected name",
        "[1, 2,]|1|8|malformed JSON",
        "{\"a\" 1}|1|7|Expected ':'",
        "[01]|1|2|malformed JSON",
        "[1.]|1|2|malformed JSON",
        "[1e]|1|2|malformed JSON",
        "[-]|1|2|malformed JSON",
        "{\"a\": 1} x|1|11|malformed JSON",
        "[tru]|1|2|malformed JSON",
        "[NaN]|1|2|malformed JSON",
        "\"abc|1|5|Unterminated string",
        "\"\\x\"|1|4|Invalid escape",
        "\"\\u12g4\"|1|4|Malformed Unicode escape",
        "{\"a\": 1, \"a\": 2}|1|13|duplicate key \"a\"",
        "[99999999999999999999]|1|2|does not fit in a long",
        "[1e999]|1|2|overflows a double",
        "// comment|1|2|malformed JSON",
        "|1|1|End of input",
    })
    void parseErrorsNameTheirPosition(String text, int line, int column, String what) {
        JsonException e = assertThrows(JsonException.class, () -> Json.parse(text == null ? "" : text));
        assertTrue(e.getMessage().contains("line " + line + ", column " + column), e.getMessage());
        assertTrue(e.getMessage().contains(what), e.getMessage());
        assertEquals(column - 1, e.offset());
    }

    @Test
    void errorsOnLaterLinesCountLines() {
        JsonException e = assertThrows(JsonException.class, () -> Json.parse("{\n  \"a\": [1,\n  2 3]\n}"));
        assertTrue(e.getMessage().contains("line 3, column 6"), e.getMessage());
        assertEquals("{\n  \"a\": [1,\n".length() + 5, e.offset());
    }

    @Test
    void rawControlCharactersInStringsAreRefused() {
        JsonException e = assertThrows(JsonException.class, () -> Json.parse("\"a\nb\""));
        assertTrue(e.getMessage().contains("line 1, column 2") && e.getMessage().contains("control characters"), e.getMessage());
    }

    @Test
    void deepNestingIsRefusedInsteadOfOverflowingTheStack() {
        String deep = "[".repeat(Json.MAX_DEPTH + 2) + "]".repeat(Json.MAX_DEPTH + 2);
        assertTrue(assertThrows(JsonException.class, () -> Json.parse(deep)).getMessage().contains("nesting"));
    }
}
