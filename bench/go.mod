module github.com/medgym/medgym/bench

go 1.26.8
