package io.mcore4j.data.chat;

import com.hubspot.jinjava.interpret.JinjavaInterpreter;
import com.hubspot.jinjava.lib.tag.Tag;
import com.hubspot.jinjava.tree.Node;
import com.hubspot.jinjava.tree.TagNode;

/**
 * transformers' {@code {% generation %} ... {% endgeneration %}}: renders its body and, when the render is
 * tracked, marks it as text the assistant generates ({@link RenderedChat#generations()}), the text
 * {@code return_assistant_tokens_mask} marks.
 */
final class GenerationTag implements Tag {
    private static final long serialVersionUID = 1L;

    @Override
    public String getName() {
        return "generation";
    }

    @Override
    public String interpret(TagNode tagNode, JinjavaInterpreter interpreter) {
        boolean tracked = interpreter.getContext().get(ChatJinja.TRACKER) != null;
        StringBuilder out = new StringBuilder();
        if (tracked) {
            out.append(RenderedChat.BEGIN_GENERATION);
        }
        for (Node child : tagNode.getChildren()) {
            out.append(child.render(interpreter));
        }
        if (tracked) {
            out.append(RenderedChat.END_GENERATION);
        }
        return out.toString();
    }
}
