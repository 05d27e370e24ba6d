module github.com/medgym/medgym/services/trainer

go 1.26.8
