package payload

import "encoding/json"

// Field returns the value of the top-level field name of a JSON object
// payload: a string's text, or the JSON text of any other value (a
// number's digits). ok is false when the payload is not a JSON object or
// has no such field.
func Field(payload, name string) (value string, ok bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(payload), &m) != nil {
		return "", false
	}
	raw, ok := m[name]
	if !ok {
		return "", false
	}
	if json.Unmarshal(raw, &value) != nil {
		value = string(raw)
	}
	return value, true
}
