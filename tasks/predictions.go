package tasks

// Truth.Extra keys of predictions tasks (schemas.AnswerPredictions): the
// agent writes a CSV file that the verifier scores against the gold labels
// in Truth.Values ("id=label"), over every gold row.
const (
	// ExtraOutputFile is the workspace-relative predictions file
	// (default "predictions.csv"); it is also in TaskView.OutputFiles.
	ExtraOutputFile = "output_file"
	// ExtraIDColumn and ExtraPredictionColumn name the file's id and
	// predicted-label columns.
	ExtraIDColumn         = "id_column"
	ExtraPredictionColumn = "prediction_column"
	// ExtraScoreColumn, when set, names a column of scores (higher = more
	// likely ExtraPositiveLabel, default "1") for AUROC.
	ExtraScoreColumn   = "score_column"
	ExtraPositiveLabel = "positive_label"
	// ExtraMinAccuracy (required) and ExtraMinAUROC (optional) are the
	// thresholds a file must reach to be accepted.
	ExtraMinAccuracy = "min_accuracy"
	ExtraMinAUROC    = "min_auroc"
)
