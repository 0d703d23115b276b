package io.mcore4j.data.tokenizer;

import com.google.gson.stream.JsonReader;
import com.google.gson.stream.JsonToken;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * GPT-2's byte-level BPE from its two files, {@code vocab.json} (token text to id) and {@code merges.txt}
 * (one merge a line, most frequent first), with the behaviour of Megatron-LM's {@code GPT2BPETokenizer}:
 * the vocabulary size is the number of entries of {@code vocab.json}, the end-of-document id is the id of
 * {@code <|endoftext|>}, and there are no special tokens in text ({@code <|endoftext|>} written in a text is
 * tokenized as the characters it is made of). A text is split by GPT-2's pre-tokenization pattern (contractions,
 * letter runs, digit runs, other-symbol runs, each optionally after one space, and whitespace runs); each
 * piece's UTF-8 bytes are mapped to GPT-2's printable byte alphabet and merged pairwise by merge rank.
 * Decoding maps the symbols back to bytes and replaces invalid UTF-8 with U+FFFD ({@code errors='replace'}).
 *
 * <p>Immutable apart from a bounded cache of tokenized pieces; safe for concurrent use.
 */
public final class Gpt2BpeTokenizer implements Tokenizer {
    /** The token whose id is the end of a document. */
    public static final String END_OF_TEXT = "<|endoftext|>";

    /** GPT-2's pre-tokenization pattern; with Unicode classes {@code \s} is Unicode white space, as in Python's. */
    private static final Pattern PIECES = Pattern.compile(
            "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
            Pattern.UNICODE_CHARACTER_CLASS);
    private static final int CACHE_LIMIT = 1 << 16;

    private final Map<String, Integer> encoder;
    private final String[] decoder;
    private final Map<String, Integer> mergeRanks;
    private final int endOfText;
    private final Map<String, int[]> cache = new ConcurrentHashMap<>();
    private final char[] byteToSymbol = new char[256];
    private final int[] symbolToByte;

    private Gpt2BpeTokenizer(Map<String, Integer> encoder, Map<String, Integer> mergeRanks, int endOfText) {
        this.encoder = encoder;
        this.mergeRanks = mergeRanks;
        this.endOfText = endOfText;
        this.decoder = new String[encoder.size()];
        encoder.forEach((token, id) -> decoder[id] = token);
        int next = 256;
        int highest = 0;
        for (int b = 0; b < 256; b++) {
            // printable Latin-1 stands for itself; the other bytes get the code points from 256 on, in byte order
            boolean printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            byteToSymbol[b] = (char) (printable ? b : next++);
            highest = Math.max(highest, byteToSymbol[b]);
        }
        symbolToByte = new int[highest + 1];
        java.util.Arrays.fill(symbolToByte, -1);
        for (int b = 0; b < 256; b++) {
            symbolToByte[byteToSymbol[b]] = b;
        }
    }

    /**
     * Reads the two files.
     *
     * @param vocabFile {@code vocab.json}: a JSON object of token text to id, the ids exactly {@code 0..n-1}
     * @param mergeFile {@code merges.txt}: an optional {@code #version} line, then "left right" a line
     * @return the tokenizer
     * @throws IOException if a file cannot be read
     * @throws IllegalArgumentException naming the file and what is wrong: not a JSON object of ids, ids that
     *     are not {@code 0..n-1}, no {@code <|endoftext|>}, a merge line that is not two tokens, or a merge of
     *     tokens the vocabulary does not have
     */
    public static Gpt2BpeTokenizer load(Path vocabFile, Path mergeFile) throws IOException {
        Map<String, Integer> encoder = readVocabulary(vocabFile);
        Integer endOfText = encoder.get(END_OF_TEXT);
        if (endOfText == null) {
            throw new IllegalArgumentException("vocab file " + vocabFile + " has no " + END_OF_TEXT
                    + " token (GPT2BPETokenizer's end of document)");
        }
        Map<String, Integer> ranks = new HashMap<>();
        try (BufferedReader in = Files.newBufferedReader(mergeFile, StandardCharsets.UTF_8)) {
            int lineNumber = 0;
            for (String line = in.readLine(); line != null; line = in.readLine()) {
                lineNumber++;
                if (line.isEmpty() || (lineNumber == 1 && line.startsWith("#version"))) {
                    continue;
                }
                String[] parts = line.split(" ", -1);
                if (parts.length != 2 || parts[0].isEmpty() || parts[1].isEmpty()) {
                    throw new IllegalArgumentException("merge file " + mergeFile + " line " + lineNumber + " is \"" + line
                            + "\" (expected two tokens separated by one space)");
                }
                if (!encoder.containsKey(parts[0]) || !encoder.containsKey(parts[1]) || !encoder.containsKey(parts[0] + parts[1])) {
                    throw new IllegalArgumentException("merge file " + mergeFile + " line " + lineNumber + " merges \"" + line
                            + "\" but vocab file " + vocabFile + " lacks " + (encoder.containsKey(parts[0] + parts[1])
                            ? "one of its parts" : "the merged token \"" + parts[0] + parts[1] + "\""));
                }
                ranks.putIfAbsent(line, ranks.size());
            }
        }
        return new Gpt2BpeTokenizer(encoder, ranks, endOfText);
    }

    private static Map<String, Integer> readVocabulary(Path vocabFile) throws IOException {
        Map<String, Integer> encoder = new HashMap<>();
        try (JsonReader json = new JsonReader(Files.newBufferedReader(vocabFile, StandardCharsets.UTF_8))) {
            json.beginObject();
            while (json.hasNext()) {
                String token = json.nextName();
                if (json.peek() != JsonToken.NUMBER) {
                    throw new IllegalArgumentException("vocab file " + vocabFile + " maps \"" + token + "\" to " + json.peek()
                            + " (expected an integer id)");
                }
                double id = json.nextDouble();
                if (id < 0 || id != Math.rint(id) || id > Integer.MAX_VALUE) {
                    throw new IllegalArgumentException("vocab file " + vocabFile + " maps \"" + token + "\" to " + id
                            + " (expected a non-negative integer id)");
                }
                encoder.put(token, (int) id);
            }
            json.endObject();
            if (json.peek() != JsonToken.END_DOCUMENT) {
                throw new IllegalArgumentException("vocab file " + vocabFile + " has more after its JSON object");
            }
        } catch (IllegalStateException | com.google.gson.stream.MalformedJsonException | java.io.EOFException e) {
            throw new IllegalArgumentException("vocab file " + vocabFile + " is not a JSON object of token ids: " + e.getMessage(), e);
        }
        boolean[] seen = new boolean[encoder.size()];
        for (Map.Entry<String, Integer> e : encoder.entrySet()) {
            int id = e.getValue();
            if (id >= seen.length || seen[id]) {
                throw new IllegalArgumentException("vocab file " + vocabFile + " gives \"" + e.getKey() + "\" id " + id
                        + " (expected each of the ids 0.." + (seen.length - 1) + " exactly once: GPT2BPETokenizer's"
                        + " vocabulary size is the number of entries)");
            }
            seen[id] = true;
        }
        return encoder;
    }

    @Override
    public int[] encode(String text) {
        List<int[]> pieces = new ArrayList<>();
        int total = 0;
        Matcher m = PIECES.matcher(text);
        while (m.find()) {
            int[] ids = piece(m.group());
            pieces.add(ids);
            total += ids.length;
        }
        int[] out = new int[total];
        int at = 0;
        for (int[] ids : pieces) {
            System.arraycopy(ids, 0, out, at, ids.length);
            at += ids.length;
        }
        return out;
    }

    /** The ids of one pre-tokenized piece. */
    private int[] piece(String piece) {
        int[] cached = cache.get(piece);
        if (cached != null) {
            return cached;
        }
        byte[] bytes = piece.getBytes(StandardCharsets.UTF_8);
        List<String> symbols = new ArrayList<>(bytes.length);
        for (byte b : bytes) {
            symbols.add(String.valueOf(byteToSymbol[b & 0xFF]));
        }
        while (symbols.size() > 1) {
            int best = -1;
            int bestRank = Integer.MAX_VALUE;
            for (int k = 0; k + 1 < symbols.size(); k++) {
                Integer rank = mergeRanks.get(symbols.get(k) + " " + symbols.get(k + 1));
                if (rank != null && rank < bestRank) {
                    bestRank = rank;
                    best = k;
                }
            }
            if (best < 0) {
                break;
            }
            // merge every occurrence of the best pair, left to right
            String left = symbols.get(best);
            String right = symbols.get(best + 1);
            List<String> merged = new ArrayList<>(symbols.size());
            for (int k = 0; k < symbols.size(); k++) {
                if (k + 1 < symbols.size() && symbols.get(k).equals(left) && symbols.get(k + 1).equals(right)) {
                    merged.add(left + right);
                    k++;
                } else {
                    merged.add(symbols.get(k));
                }
            }
            symbols = merged;
        }
        int[] ids = new int[symbols.size()];
        for (int k = 0; k < ids.length; k++) {
            Integer id = encoder.get(symbols.get(k));
            if (id == null) {
                throw new IllegalArgumentException("GPT2BPETokenizer: the vocabulary has no token \"" + symbols.get(k)
                        + "\" for the text \"" + piece + "\" (a byte the vocab file does not cover)");
            }
            ids[k] = id;
        }
        if (cache.size() < CACHE_LIMIT) {
            cache.put(piece, ids);
        }
        return ids;
    }

    /**
     * Turns ids back into text; byte runs that are not valid UTF-8 become U+FFFD.
     *
     * @param ids token ids in {@code [0, vocabularySize())}
     * @return the text
     * @throws IllegalArgumentException if an id is outside the vocabulary, naming it and its position
     */
    @Override
    public String decode(int[] ids) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream(ids.length * 4);
        for (int k = 0; k < ids.length; k++) {
            int id = ids[k];
            if (id < 0 || id >= decoder.length) {
                throw new IllegalArgumentException("token id " + id + " at position " + k
                        + " is outside the GPT2BPETokenizer vocabulary [0, " + decoder.length + ")");
            }
            decoder[id].codePoints().forEach(symbol -> {
                int b = symbol < symbolToByte.length ? symbolToByte[symbol] : -1;
                if (b >= 0) {
                    bytes.write(b);
                } else {
                    // a character outside the byte alphabet (a hand-added token): its own UTF-8
                    byte[] raw = Character.toString(symbol).getBytes(StandardCharsets.UTF_8);
                    bytes.write(raw, 0, raw.length);
                }
            });
        }
        return bytes.toString(StandardCharsets.UTF_8);
    }

    /** @return the number of entries of {@code vocab.json} */
    @Override
    public int vocabularySize() {
        return decoder.length;
    }

    /** @return the id of {@code <|endoftext|>} */
    @Override
    public OptionalInt endOfDocument() {
        return OptionalInt.of(endOfText);
    }
}
