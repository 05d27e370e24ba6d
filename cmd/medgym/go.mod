module github.com/medgym/medgym/cmd/medgym

go 1.26.8
