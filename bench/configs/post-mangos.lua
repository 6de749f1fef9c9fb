-- wrk script for cases 8 and 9: POST the Fruitshop "Mangos" product (Membrane's scenario 5).
wrk.method = "POST"
wrk.body = '{"name":"Mangos","price":2.79}'
wrk.headers["Content-Type"] = "application/json"
