module github.com/medgym/medgym/services/dispatcher

go 1.26.8
