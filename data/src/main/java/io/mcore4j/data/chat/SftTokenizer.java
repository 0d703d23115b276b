package io.mcore4j.data.chat;

import io.mcore4j.data.preprocess.HuggingFaceTokenizerAdapter;
import io.mcore4j.data.preprocess.TokenSpans;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * Turns an {@link SftExample} into token ids and the mask of the tokens the loss is taken on.
 *
 * <p>A chat is rendered by its {@link ChatTemplate} and tokenized as transformers' {@code apply_chat_template}
 * tokenizes it (the rendered text, without the tokenizer's own special tokens). The trained tokens are each
 * assistant turn's: what the template writes for an assistant message after the generation prompt (the text
 * {@code add_generation_prompt=True} appends after the messages before it, such as
 * {@code <|im_start|>assistant\n}), through the end of the turn, the end-of-turn token and whatever the template
 * writes after it for that message (Qwen's newline) included: what the model must learn to write after the
 * prompt, and to stop. The text of a message is found by rendering the whole conversation once and noting what
 * each iteration of the template's loops over the messages writes, so templates whose rendering of a turn
 * depends on later turns (Qwen3 drops the reasoning of turns before the last user query) are handled; a template
 * with {@code {% generation %}} blocks is taken at its word instead, as transformers'
 * {@code return_assistant_tokens_mask} does. Characters become tokens as there too: a range marks the token
 * holding its first character, the token holding its last, and those between.
 *
 * <p>A prompt and completion given as texts is tokenized as one text with the tokenizer's special tokens and the
 * {@code eos_token} appended to the completion (TRL's format); the trained tokens are those reaching into the
 * completion. Not safe for concurrent use.
 */
public final class SftTokenizer {
    private final ChatTemplate template;
    private final HuggingFaceTokenizerAdapter tokenizer;

    /**
     * @param template the chat template (its special tokens give the {@code eos_token})
     * @param tokenizer the tokenizer; not closed here
     */
    public SftTokenizer(ChatTemplate template, HuggingFaceTokenizerAdapter tokenizer) {
        this.template = Objects.requireNonNull(template, "template");
        this.tokenizer = Objects.requireNonNull(tokenizer, "tokenizer");
    }

    /**
     * A tokenized example.
     *
     * @param ids the token ids of the whole example, not cut to any length
     * @param lossMask per token, 1 where the loss is taken (an assistant or completion token), else 0
     */
    public record Tokens(int[] ids, byte[] lossMask) {}

    /**
     * @param example a chat or a prompt and completion
     * @return the tokens and their mask
     * @throws ChatTemplateException if the template refuses the chat, cannot render it, or renders an assistant
     *     turn whose text cannot be found
     */
    public Tokens tokenize(SftExample example) {
        if (example instanceof SftExample.PromptCompletion pc) {
            Object eos = template.specialTokens().get("eos_token");
            String end = eos instanceof String e && !pc.completion().endsWith(e) ? e : "";
            String text = pc.prompt() + pc.completion() + end;
            TokenSpans spans = tokenizer.encodeWithSpans(text, true);
            byte[] mask = new byte[spans.ids().length];
            for (int t = 0; t < mask.length; t++) {
                mask[t] = (byte) (spans.ends()[t] > pc.prompt().length() ? 1 : 0);
            }
            return new Tokens(spans.ids(), mask);
        }
        SftExample.Conversation chat = (SftExample.Conversation) example;
        RenderedChat rendered = template.renderTracked(chat.messages(), chat.tools(), chat.templateVariables());
        List<RenderedChat.Span> trained = template.hasGenerationTags() ? generations(rendered, chat.firstTrained())
                : assistantTurns(chat, rendered);
        TokenSpans spans = tokenizer.encodeWithSpans(rendered.text(), false);
        return new Tokens(spans.ids(), mask(spans, rendered.text().length(), trained));
    }

    /** The {@code {% generation %}} spans from the first trained message on. */
    private static List<RenderedChat.Span> generations(RenderedChat rendered, int firstTrained) {
        int from = 0;
        for (int k = firstTrained; k < rendered.messages().size() && firstTrained > 0; k++) {
            if (!rendered.messages().get(k).isEmpty()) {
                from = rendered.messages().get(k).get(0).start();
                break;
            }
        }
        List<RenderedChat.Span> out = new ArrayList<>();
        for (RenderedChat.Span s : rendered.generations()) {
            if (s.start() >= from) {
                out.add(s);
            }
        }
        return out;
    }

    /** Each trained assistant message's text after its generation prompt. */
    private List<RenderedChat.Span> assistantTurns(SftExample.Conversation chat, RenderedChat rendered) {
        List<RenderedChat.Span> out = new ArrayList<>();
        List<Map<String, Object>> messages = chat.messages();
        for (int k = chat.firstTrained(); k < messages.size(); k++) {
            if (!"assistant".equals(messages.get(k).get("role"))) {
                continue;
            }
            List<RenderedChat.Span> pieces = rendered.messages().get(k);
            if (pieces.size() > 1) {
                throw new ChatTemplateException("chat template " + template.origin() + " writes assistant message " + k
                        + " in " + pieces.size() + " places: its tokens cannot be told apart (use a template with"
                        + " {% generation %} blocks)", null);
            }
            if (pieces.isEmpty()) {
                throw new ChatTemplateException("chat template " + template.origin() + " writes nothing for assistant"
                        + " message " + k + " inside a loop over the messages: its tokens cannot be found (use a"
                        + " template with {% generation %} blocks)", null);
            }
            RenderedChat.Span turn = pieces.get(0);
            List<Map<String, Object>> before = messages.subList(0, k);
            String prompt = template.render(before, chat.tools(), true, chat.templateVariables());
            String noPrompt = template.render(before, chat.tools(), false, chat.templateVariables());
            if (!prompt.startsWith(noPrompt)) {
                throw new ChatTemplateException("chat template " + template.origin() + ": the generation prompt changes"
                        + " the text before it, so the start of assistant message " + k + " cannot be found (use a"
                        + " template with {% generation %} blocks)", null);
            }
            String header = prompt.substring(noPrompt.length());
            if (!rendered.text().startsWith(header, turn.start())) {
                throw new ChatTemplateException("chat template " + template.origin() + " does not begin assistant message "
                        + k + " with its generation prompt " + quote(header) + " but with "
                        + quote(rendered.text().substring(turn.start(), Math.min(turn.end(), turn.start() + header.length() + 20)))
                        + ": its tokens cannot be told apart (use a template with {% generation %} blocks)", null);
            }
            if (turn.start() + header.length() < turn.end()) {
                out.add(new RenderedChat.Span(turn.start() + header.length(), turn.end()));
            }
        }
        return out;
    }

    private static String quote(String s) {
        return "\"" + s.replace("\n", "\\n") + "\"";
    }

    /**
     * transformers' rule: a range marks the first token holding its first character through the first token
     * holding its last.
     */
    private static byte[] mask(TokenSpans spans, int textLength, List<RenderedChat.Span> ranges) {
        int n = spans.ids().length;
        int[] tokenOf = new int[textLength];
        Arrays.fill(tokenOf, -1);
        for (int t = 0; t < n; t++) {
            for (int c = spans.starts()[t]; c < spans.ends()[t] && c < textLength; c++) {
                if (tokenOf[c] < 0) {
                    tokenOf[c] = t; // the first token holding it, as char_to_token (a character may be several byte tokens)
                }
            }
        }
        byte[] mask = new byte[n];
        for (RenderedChat.Span r : ranges) {
            int first = -1;
            for (int c = r.start(); c < r.end() && first < 0; c++) {
                first = tokenOf[c];
            }
            int last = -1;
            for (int c = r.end() - 1; c >= r.start() && last < 0; c--) {
                last = tokenOf[c];
            }
            for (int t = first; t >= 0 && t <= last; t++) {
                mask[t] = 1;
            }
        }
        return mask;
    }
}
