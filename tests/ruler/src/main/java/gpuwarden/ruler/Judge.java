package gpuwarden.ruler;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import software.amazon.event.ruler.Machine;

/**
 * Event Ruler (AWS's EventBridge matching engine) as a judge: reads one table from stdin,
 * {"rules": {"name": pattern, ...}, "events": [event, ...]}, and writes
 * {"matches": [[names of the rules that match event 0, sorted], ...]} to stdout.
 * One JVM for the whole table. An invalid pattern is an error (exit 2), never "no match".
 */
public final class Judge {
    private Judge() {}

    public static void main(String[] args) throws Exception {
        ObjectMapper json = new ObjectMapper();
        JsonNode table = json.readTree(System.in);
        Machine machine = new Machine();
        Iterator<Map.Entry<String, JsonNode>> rules = table.get("rules").fields();
        while (rules.hasNext()) {
            Map.Entry<String, JsonNode> rule = rules.next();
            try {
                machine.addRule(rule.getKey(), json.writeValueAsString(rule.getValue()));
            } catch (Exception e) {
                System.err.println("rule " + rule.getKey() + " rejected by Event Ruler: " + e);
                System.exit(2);
            }
        }
        ObjectNode out = json.createObjectNode();
        ArrayNode all = out.putArray("matches");
        for (JsonNode event : table.get("events")) {
            // rulesForJSONEvent: the array-consistent matcher, the one EventBridge's behaviour follows
            List<String> names = new ArrayList<>(machine.rulesForJSONEvent(json.writeValueAsString(event)));
            Collections.sort(names);
            ArrayNode row = all.addArray();
            names.forEach(row::add);
        }
        json.writeValue(System.out, out);
    }
}
