package train

import (
	"testing"

	"github.com/medgym/medgym/schemas/parquet"
)

// A correct abstention (EHRSQL 2024) is a successful episode: SFT keeps it
// with its reward; a wrong abstention and a penalised wrong answer are not.
func TestSFTKeepsCorrectAbstentions(t *testing.T) {
	row := func(id, outcome string, reward float64) *parquet.Row {
		return &parquet.Row{EpisodeID: id, TaskID: id, Dataset: "ehrsql2024", Split: "train", Outcome: outcome, Reward: reward,
			Messages: []parquet.Message{{Role: "system", Content: "sys"}, {Role: "user", Content: "q"},
				{Role: "assistant", Content: `{"action":"answer","params":{"answer":"null"}}`}},
			Turns: []parquet.Turn{{Action: "answer"}}}
	}
	eps := []*Episode{
		NewEpisode(row("a", "abstained_correctly", 1), ""),
		NewEpisode(row("b", "abstained_wrongly", 0), ""),
		NewEpisode(row("c", "incorrect", -5), ""),
		NewEpisode(row("d", "correct", 1), ""),
	}
	recs, _ := SFT(eps, FormatMask)
	if len(recs) != 2 || recs[0].EpisodeID != "a" || recs[1].EpisodeID != "d" || recs[0].Reward != 1 {
		t.Fatalf("SFT records %+v, want episodes a and d", recs)
	}
}
