package fakellm

import (
	"hash/fnv"
	"unicode/utf8"

	"github.com/medgym/medgym/schemas"
)

// Special token ids.
const (
	// EOSTokenID ends every completion (vLLM includes the stop token).
	EOSTokenID int32 = 2
	// MessageStartTokenID opens every prompt message.
	MessageStartTokenID int32 = 3
)

// Tokenize splits text into pieces: runs of ASCII letters, digits and '_',
// runs of non-ASCII characters, runs of spaces, and single other bytes.
// Joining the pieces gives text back.
func Tokenize(text string) []string {
	var out []string
	for i := 0; i < len(text); {
		j := i + 1
		switch c := text[i]; {
		case isWord(c):
			for j < len(text) && isWord(text[j]) {
				j++
			}
		case c >= utf8.RuneSelf:
			for j < len(text) && text[j] >= utf8.RuneSelf {
				j++
			}
		case c == ' ':
			for j < len(text) && text[j] == ' ' {
				j++
			}
		}
		out = append(out, text[i:j])
		i = j
	}
	return out
}

// TokenID is the id of a piece: a hash into [1000, 101000).
func TokenID(piece string) int32 {
	h := fnv.New32a()
	h.Write([]byte(piece))
	return int32(h.Sum32()%100000) + 1000
}

// PromptTokenIDs are the prompt ids the server reports for msgs: per
// message MessageStartTokenID, then the pieces of role + "\n" + content.
func PromptTokenIDs(msgs []schemas.ChatMessage) []int32 {
	var ids []int32
	for _, m := range msgs {
		ids = append(ids, MessageStartTokenID)
		for _, p := range Tokenize(m.Role + "\n" + m.Content) {
			ids = append(ids, TokenID(p))
		}
	}
	return ids
}

// CompletionTokenIDs are the ids the server reports for a completion that
// stopped normally: the pieces of text, then EOSTokenID.
func CompletionTokenIDs(text string) []int32 {
	pieces := Tokenize(text)
	ids := make([]int32, 0, len(pieces)+1)
	for _, p := range pieces {
		ids = append(ids, TokenID(p))
	}
	return append(ids, EOSTokenID)
}

func isWord(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_'
}
