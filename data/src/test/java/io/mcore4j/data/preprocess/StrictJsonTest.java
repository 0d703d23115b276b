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
        assertEquals("second", text("{\"text\":\"first\",\"text\":\"second\"}")[0]);
    }

    @Test
    void malformedLinesAreReportedWithAColumn() {
        String[][] cases = {
            {"{\"text\": \"a\"", "expected ',' or '}' in object, found end of input at column 13"},
            {"{\"text\": \"a\",}", "expected '\"' to start a string, found '}' at column 14"},
            {"{\"text\" \"a\"}", "expected ':' after key \"text\", found '\"' at column 9"},
            {"{\"text\": \"a\"} x", "unexpected 'x' after the JSON value at column 15"},
            {"{\"text\": \"a\tb\"}", "raw control character U+0009 in string at column 12"},
            {"{\"text\": \"\\x\"}", "invalid escape \\x at column 11"},
            {"{\"text\": \"\\ud83d\"}", "high surrogate \\uD83D is not followed by a low surrogate escape at column 11"},
            {"{\"text\": \"\\ude00\"}", "lone low surrogate \\uDE00 at column 11"},
            {"{\"text\": \"\\u12G4\"}", "invalid hex digit 'G' in \\u escape at column 15"},
            {"{\"text\": 01}", "field \"text\" is not a string at column 2"},
            {"{\"id\": 01, \"text\": \"a\"}", "expected ',' or '}' in object, found '1' at column 9"},
            {"{\"id\": tru, \"text\": \"a\"}", "expected true at column 8"},
            {"{\"id\": NaN, \"text\": \"a\"}", "expected a value, found 'N' at column 8"},
            {"[\"text\"]", "expected '{' to start an object, found '[' at column 1"},
            {"{\"title\": \"a\"}", "key \"text\" is missing at column 1"},
            {"{\"text\": \"abc", "unterminated string at column 10"},
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
