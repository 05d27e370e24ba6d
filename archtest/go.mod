module github.com/medgym/medgym/archtest

go 1.26.8
