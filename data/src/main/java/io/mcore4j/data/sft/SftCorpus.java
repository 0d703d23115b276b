package io.mcore4j.data.sft;

import io.mcore4j.data.chat.ChatTemplate;
import io.mcore4j.data.chat.SftExample;
import io.mcore4j.data.chat.SftTokenizer;
import io.mcore4j.data.indexed.DType;
import io.mcore4j.data.indexed.IndexedDatasetReader;
import io.mcore4j.data.indexed.IndexedDatasetWriter;
import io.mcore4j.data.preprocess.HuggingFaceTokenizerAdapter;
import io.mcore4j.data.preprocess.JsonSyntaxException;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.List;
import java.util.function.Consumer;

/**
 * A JSON Lines file of chats or prompt/completion pairs, tokenized once and kept on disk as Megatron's preprocessing
 * keeps corpora: two indexed datasets ({@code .bin}/{@code .idx}) with one document per line of the input, the token
 * ids ({@code <name>.<hash>.sft_tokens}) and the 0/1 loss mask of each token ({@code <name>.<hash>.sft_loss_mask},
 * uint8). Whole conversations are kept, whatever the sequence length, so that a run with another
 * {@code --seq-length} (or one that packs conversations) reuses them. The hash covers the input's bytes, the
 * tokenizer's {@code tokenizer.json}, the chat template and its special tokens, and this format; a
 * {@code .sft_description.txt}, written last, marks a complete entry. Files are written under temporary names and
 * renamed, so concurrent builders never see a partial entry.
 *
 * <p>This object owns the two readers.
 */
public final class SftCorpus implements AutoCloseable {
    /** Changes whenever the tokenization or the file layout changes, so that old caches are not reused. */
    private static final String FORMAT = "mcore4j-sft-1";

    private final IndexedDatasetReader tokens;
    private final IndexedDatasetReader lossMask;

    private SftCorpus(IndexedDatasetReader tokens, IndexedDatasetReader lossMask) throws IOException {
        if (tokens.documentCount() != lossMask.documentCount()) {
            tokens.close();
            lossMask.close();
            throw new IOException(tokens.prefix() + " and " + lossMask.prefix() + " hold different numbers of conversations");
        }
        this.tokens = tokens;
        this.lossMask = lossMask;
    }

    /** What {@link #open} did: the corpus, where it lives, and whether it was tokenized now. */
    public record Opened(SftCorpus corpus, Path tokensPrefix, boolean built) {}

    /**
     * Opens the cached tokenization of a file, tokenizing it first when there is none.
     *
     * @param input the JSON Lines file
     * @param tokenizerJson the tokenizer's {@code tokenizer.json} (hashed; the tokenizer itself is {@code tokenizer})
     * @param template the chat template
     * @param tokenizer the tokenizer
     * @param cacheDirectory where the files go
     * @param log progress lines
     * @return the corpus
     * @throws IOException if a file cannot be read or written
     * @throws IllegalArgumentException naming the file, line and column of a line that is not an example, or the
     *     template's refusal of it
     */
    public static Opened open(Path input, Path tokenizerJson, ChatTemplate template, HuggingFaceTokenizerAdapter tokenizer,
                              Path cacheDirectory, Consumer<String> log) throws IOException {
        String description = FORMAT + "\ninput " + input.toAbsolutePath().normalize() + " sha256 " + sha256(input)
                + "\ntokenizer " + tokenizerJson.toAbsolutePath().normalize() + " sha256 " + sha256(tokenizerJson)
                + "\nchat template " + template.origin() + " sha256 " + sha256(template.source())
                + "\nspecial tokens " + template.specialTokens() + "\n";
        String name = input.getFileName().toString().replaceFirst("\\.jsonl?$", "") + "." + sha256(description).substring(0, 16);
        Files.createDirectories(cacheDirectory);
        Path tokens = cacheDirectory.resolve(name + ".sft_tokens");
        Path mask = cacheDirectory.resolve(name + ".sft_loss_mask");
        Path descriptionFile = cacheDirectory.resolve(name + ".sft_description.txt");
        boolean built = !(Files.isRegularFile(descriptionFile) && Files.readString(descriptionFile).equals(description));
        if (built) {
            long count = tokenize(input, new SftTokenizer(template, tokenizer), tokenizer.vocabularySize(), tokens, mask);
            Path temp = Files.createTempFile(cacheDirectory, name + ".", ".tmp");
            Files.writeString(temp, description);
            Files.move(temp, descriptionFile, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
            log.accept(" > tokenized " + count + " conversations of " + input + " into " + tokens + ".bin/.idx and "
                    + mask + ".bin/.idx");
        } else {
            log.accept(" > reusing the tokenized conversations of " + input + " in " + tokens + ".bin/.idx");
        }
        return new Opened(new SftCorpus(IndexedDatasetReader.open(tokens), IndexedDatasetReader.open(mask)), tokens, built);
    }

    private static long tokenize(Path input, SftTokenizer sft, int vocabularySize, Path tokens, Path mask) throws IOException {
        String suffix = ".tmp-" + ProcessHandle.current().pid() + "-" + Thread.currentThread().getId();
        Path tempTokens = Path.of(tokens + suffix);
        Path tempMask = Path.of(mask + suffix);
        long count = 0;
        try (BufferedReader in = new BufferedReader(new java.io.InputStreamReader(Files.newInputStream(input),
                StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)));
             IndexedDatasetWriter tokenWriter = IndexedDatasetWriter.create(tempTokens, DType.smallestFor(vocabularySize));
             IndexedDatasetWriter maskWriter = IndexedDatasetWriter.create(tempMask, DType.UINT8)) {
            long lineNumber = 0;
            for (String line = readLine(in, input, lineNumber); line != null; line = readLine(in, input, lineNumber)) {
                lineNumber++;
                if (line.isBlank()) {
                    continue;
                }
                SftTokenizer.Tokens t;
                try {
                    t = sft.tokenize(SftExample.parse(line));
                } catch (JsonSyntaxException e) {
                    throw new IllegalArgumentException(input + ":" + lineNumber + ":" + e.column() + ": " + e.getMessage(), e);
                } catch (IllegalArgumentException e) {
                    throw new IllegalArgumentException(input + ":" + lineNumber + ": " + e.getMessage(), e);
                }
                int[] bits = new int[t.lossMask().length];
                for (int k = 0; k < bits.length; k++) {
                    bits[k] = t.lossMask()[k];
                }
                tokenWriter.addDocument(t.ids());
                maskWriter.addDocument(bits);
                count++;
            }
            if (count == 0) {
                throw new IllegalArgumentException(input + " holds no conversation (one JSON object per line)");
            }
            tokenWriter.finish();
            maskWriter.finish();
        } catch (IOException | RuntimeException e) {
            for (Path p : List.of(tempTokens, tempMask)) {
                Files.deleteIfExists(Path.of(p + ".bin"));
                Files.deleteIfExists(Path.of(p + ".idx"));
            }
            throw e;
        }
        for (Path[] pair : new Path[][] {{tempMask, mask}, {tempTokens, tokens}}) {
            for (String ext : List.of(".bin", ".idx")) {
                Files.move(Path.of(pair[0] + ext), Path.of(pair[1] + ext), StandardCopyOption.REPLACE_EXISTING,
                        StandardCopyOption.ATOMIC_MOVE);
            }
        }
        return count;
    }

    private static String readLine(BufferedReader in, Path input, long linesRead) throws IOException {
        try {
            return in.readLine();
        } catch (CharacterCodingException e) {
            throw new IllegalArgumentException(input + ":" + (linesRead + 1) + ": not UTF-8 text", e);
        }
    }

    private static String sha256(Path file) throws IOException {
        try (InputStream in = Files.newInputStream(file)) {
            MessageDigest digest = digest();
            byte[] buffer = new byte[1 << 16];
            for (int n = in.read(buffer); n > 0; n = in.read(buffer)) {
                digest.update(buffer, 0, n);
            }
            return HexFormat.of().formatHex(digest.digest());
        }
    }

    private static String sha256(String text) {
        return HexFormat.of().formatHex(digest().digest(text.getBytes(StandardCharsets.UTF_8)));
    }

    private static MessageDigest digest() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is required by every JDK", e);
        }
    }

    /** @return the number of conversations */
    public long size() {
        return tokens.documentCount();
    }

    /** @return the token ids, one document per conversation (whole, never cut) */
    public IndexedDatasetReader tokens() {
        return tokens;
    }

    /** @return the loss mask, one 0/1 value per token, one document per conversation */
    public IndexedDatasetReader lossMask() {
        return lossMask;
    }

    /** @return both readers, for whoever takes over closing them ({@link io.mcore4j.data.gpt.GptSplits#of}) */
    public List<IndexedDatasetReader> readers() {
        return List.of(tokens, lossMask);
    }

    @Override
    public void close() throws IOException {
        try {
            tokens.close();
        } finally {
            lossMask.close();
        }
    }
}
