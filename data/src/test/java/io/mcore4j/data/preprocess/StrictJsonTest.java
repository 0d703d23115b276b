package io.mcore4j.data.preprocess;

import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class StrictJsonTest {
    private static String[] text(String json) {
        return StrictJson.stringFields(json, List.of("text"));
    }

    @Test
    void escapesAreDecoded() {
        assertEquals("a\nb\"c\\d/e\tf\bg\fh\ri", text("{\"text\": \"a\\nb\\\"c\\\\d\\/e\\tf\\bg\\fh\\ri\"}")[0]);
        assertEquals("caf\u00e9", text("{\"text\":\"caf\\u00E9\"}")[0]);
        assertEquals("\uD83D\uDE00!", text("{\"text\":\"\\ud83d\\ude00!\"}")[0]);
        assertEquals("raw \u00e9 \uD83D\uDE00", text("{\"text\":\"raw \u00e9 \uD83D\uDE00\"}")[0]);
        assertEquals("", text("{\"text\":\"\"}")[0]);
    }

    @Test
    void otherFieldsOfAnyShapeAreSkippedAndKeysReadInOrder() {
        String line = "{ \"id\": -12.5e+3, \"meta\": {\"a\": [1, true, null, {\"text\": \"inner\"}]}, \"text\": \"outer\","
                + " \"title\": \"T\", \"flag\": false }";
        assertArrayEquals(new String[] {"T", "outer"}, StrictJson.stringFields(line, List.of("title", "text")));
        JsonSyntaxException twice = assertThrows(JsonSyntaxException.class, () -> text("{\"text\":\"first\",\"text\":\"second\"}"));
        assertEquals("duplicate key \"text\" at column 18", twice.getMessage());
        JsonSyntaxException nested = assertThrows(JsonSyntaxException.class,
                () -> text("{\"m\": {\"a\": 1, \"a\": 2}, \"text\": \"x\"}"));
        assertEquals("duplicate key \"a\" at column 17", nested.getMessage());
    }

    @Test
    void malformedLinesAreReportedWithAColumn() {
        // Gson (strict) finds most errors; the column is where its reader stood, just past the offending text
        String[][] cases = {
            {"{\"text\": \"a\"", "End of input at column 13"},
            {"{\"text\": \"a\",}", "Expected name at column 15"},
            {"{\"text\" \"a\"}", "Expected ':' at column 10"},
            {"{\"text\": \"a\"} x", "malformed JSON (a literal, number or separator that strict JSON does not allow) at column 16"},
            {"{\"text\": \"a\tb\"}", "Unescaped control characters (\\u0000-\\u001F) are not allowed in strict mode at column 11"},
            {"{\"text\": \"\\x\"}", "Invalid escape sequence at column 13"},
            {"{\"text\": \"\\ud83d\"}", "string holds a lone surrogate \\uD83D at column 11"},
            {"{\"text\": \"\\ude00\"}", "string holds a lone surrogate \\uDE00 at column 11"},
            {"{\"text\": \"\\u12G4\"}", "Malformed Unicode escape \\u12G4 at column 13"},
            {"{\"text\": 01}", "malformed JSON (a literal, number or separator that strict JSON does not allow) at column 10"},
            {"{\"text\": 5}", "field \"text\" is not a string but a number at column 11"},
            {"{\"id\": 01, \"text\": \"a\"}", "malformed JSON (a literal, number or separator that strict JSON does not allow) at column 8"},
            {"{\"id\": tru, \"text\": \"a\"}", "malformed JSON (a literal, number or separator that strict JSON does not allow) at column 8"},
            {"{\"id\": NaN, \"text\": \"a\"}", "malformed JSON (a literal, number or separator that strict JSON does not allow) at column 8"},
            {"[\"text\"]", "expected a JSON object, found an array at column 2"},
            {"{\"title\": \"a\"}", "key \"text\" is missing at column 1"},
            {"{\"text\": \"abc", "Unterminated string at column 14"},
        };
        for (String[] c : cases) {
            JsonSyntaxException e = assertThrows(JsonSyntaxException.class, () -> text(c[0]), c[0]);
            assertEquals(c[1], e.getMessage(), c[0]);
        }
    }

    @Test
    void parseBuildsPlainValues() {
        Object value = StrictJson.parse("{\"model\": {\"vocab\": {\"a\": 0, \"b\": 1}}, \"list\": [1.5, \"x\", null, true]}");
        assertTrue(value instanceof Map<?, ?>);
        Map<?, ?> root = (Map<?, ?>) value;
        assertEquals(Map.of("a", 0.0, "b", 1.0), ((Map<?, ?>) root.get("model")).get("vocab"));
        List<?> list = (List<?>) root.get("list");
        assertEquals(1.5, list.get(0));
        assertEquals("x", list.get(1));
        assertNull(list.get(2));
        assertEquals(Boolean.TRUE, list.get(3));
        assertThrows(JsonSyntaxException.class, () -> StrictJson.parse("[1,]"));
        assertThrows(JsonSyntaxException.class, () -> StrictJson.parse(""));
    }
}
