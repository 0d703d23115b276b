package io.mcore4j.data.chat;

import com.hubspot.jinjava.interpret.InterpretException;
import com.hubspot.jinjava.interpret.JinjavaInterpreter;
import com.hubspot.jinjava.interpret.JinjavaInterpreter.InterpreterScopeClosable;
import com.hubspot.jinjava.lib.tag.ForTag;
import com.hubspot.jinjava.objects.collections.PyMap;
import com.hubspot.jinjava.tree.Node;
import com.hubspot.jinjava.tree.TagNode;
import com.hubspot.jinjava.tree.parse.TagToken;
import com.hubspot.jinjava.util.ForLoop;
import com.hubspot.jinjava.util.ObjectTruthValue;
import org.apache.commons.lang3.tuple.Pair;

import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

/**
 * Jinja's {@code for} loop, replacing jinjava's: with the loop filter ({@code for key, val in tool.items() if key
 * != "return"}, which jinjava ignores: the filtered items are the loop's, so {@code loop.last} is the last kept
 * one, as in Jinja), {@code break} and {@code continue}, dicts iterated by key and strings by character. When
 * the render carries a {@link Tracker}, each iteration whose item is one of the conversation's messages writes
 * its output between markers naming the message ({@link RenderedChat}), which is how the text a template writes
 * for each message is found.
 */
final class MessageLoopTag extends ForTag {
    private static final long serialVersionUID = 1L;

    /** The messages of one render, by identity (a template's slices and reversals keep the same objects). */
    static final class Tracker {
        private final Map<Object, Integer> index = new IdentityHashMap<>();

        Tracker(List<? extends Map<String, Object>> messages) {
            for (int k = 0; k < messages.size(); k++) {
                index.put(messages.get(k), k);
            }
        }

        Integer indexOf(Object item) {
            Object raw = item;
            while (raw instanceof PyMap wrapped && wrapped.toMap() != raw) {
                raw = wrapped.toMap();
            }
            return index.get(raw);
        }
    }

    @Override
    public String interpret(TagNode tagNode, JinjavaInterpreter interpreter) {
        Pair<List<String>, String> varsAndExpression = getLoopVarsAndExpression((TagToken) tagNode.getMaster());
        List<String> vars = varsAndExpression.getLeft();
        String expression = varsAndExpression.getRight();
        String condition = null;
        int at = loopFilter(expression);
        if (at >= 0) {
            condition = expression.substring(at + " if ".length());
            expression = expression.substring(0, at);
        }
        List<Object> items = items(interpreter.resolveELExpression(expression, tagNode.getLineNumber()));
        Tracker tracker = interpreter.getContext().get(ChatJinja.TRACKER) instanceof Tracker t ? t : null;
        StringBuilder out = new StringBuilder();
        try (InterpreterScopeClosable scope = interpreter.enterScope()) {
            if (condition != null) {
                List<Object> kept = new ArrayList<>();
                for (Object item : items) {
                    bind(vars, item, interpreter, tagNode);
                    if (ObjectTruthValue.evaluate(interpreter.resolveELExpression(condition, tagNode.getLineNumber()))) {
                        kept.add(item);
                    }
                }
                items = kept;
            }
            ForLoop loop = new ForLoop(items.iterator(), items.size());
            interpreter.getContext().put(LOOP, loop);
            while (loop.hasNext()) {
                Object item = loop.next();
                bind(vars, item, interpreter, tagNode);
                Integer message = tracker == null ? null : tracker.indexOf(item);
                if (message != null) {
                    out.append(RenderedChat.BEGIN_MESSAGE).append(message).append(RenderedChat.END_NUMBER);
                }
                for (Node child : tagNode.getChildren()) {
                    out.append(child.render(interpreter));
                    if (loop.isContinued()) {
                        break;
                    }
                }
                if (message != null) {
                    out.append(RenderedChat.END_MESSAGE).append(message).append(RenderedChat.END_NUMBER);
                }
            }
        }
        return out.toString();
    }

    /** Where {@code " if "} starts the loop filter: outside brackets and string literals, or -1. */
    private static int loopFilter(String expression) {
        int depth = 0;
        char quote = 0;
        for (int i = 0; i < expression.length(); i++) {
            char c = expression.charAt(i);
            if (quote != 0) {
                if (c == '\\') {
                    i++;
                } else if (c == quote) {
                    quote = 0;
                }
            } else if (c == '\'' || c == '"') {
                quote = c;
            } else if (c == '(' || c == '[' || c == '{') {
                depth++;
            } else if (c == ')' || c == ']' || c == '}') {
                depth--;
            } else if (depth == 0 && expression.startsWith(" if ", i)) {
                return i;
            }
        }
        return -1;
    }

    /** What Jinja iterates: a list's items, a dict's keys, a string's characters; nothing for none. */
    private static List<Object> items(Object collection) {
        List<Object> items = new ArrayList<>();
        if (collection instanceof Map<?, ?> map) {
            items.addAll(map.keySet());
        } else if (collection instanceof Iterable<?> iterable) {
            iterable.forEach(items::add);
        } else if (collection instanceof Object[] array) {
            items.addAll(List.of(array));
        } else if (collection instanceof CharSequence s) {
            s.codePoints().forEach(c -> items.add(new String(Character.toChars(c))));
        } else if (collection != null) {
            throw new IllegalArgumentException("cannot loop over " + collection.getClass().getSimpleName() + " " + collection);
        }
        return items;
    }

    /** Sets the loop variables: one takes the item, several unpack a pair or list. */
    private static void bind(List<String> vars, Object item, JinjavaInterpreter interpreter, TagNode tagNode) {
        if (vars.size() == 1) {
            interpreter.getContext().put(vars.get(0), interpreter.wrap(item));
            return;
        }
        List<Object> parts = new ArrayList<>();
        if (item instanceof Map.Entry<?, ?> entry) {
            parts.add(entry.getKey());
            parts.add(entry.getValue());
        } else if (item instanceof Iterable<?> iterable) {
            iterable.forEach(parts::add);
        }
        if (parts.size() != vars.size()) {
            throw new InterpretException("cannot unpack " + item + " into " + String.join(", ", vars),
                    tagNode.getLineNumber(), tagNode.getStartPosition());
        }
        for (int k = 0; k < vars.size(); k++) {
            interpreter.getContext().put(vars.get(k), interpreter.wrap(parts.get(k)));
        }
    }
}
