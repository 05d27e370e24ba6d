module github.com/medgym/medgym/schemas

go 1.26.8
