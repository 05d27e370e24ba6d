module github.com/medgym/medgym/services/planted

go 1.26.8
