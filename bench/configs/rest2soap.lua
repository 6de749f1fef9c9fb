-- Scenario 6 (REST to SOAP): POST /create-person with a ~400-byte JSON person.
-- Used by bench/run.sh as: wrk -s bench/configs/rest2soap.lua http://127.0.0.1:2003/create-person
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"person":{"firstName":"Jane","lastName":"Doe","email":"jane.doe@example.com","phone":"+49228123456","birthDate":"1990-04-01","gender":"FEMALE","nationality":"DE","company":"Example GmbH","height":172,"newsletter":true,"hobby":["chess","hiking","cooking"],"address":{"street":"Hauptstrasse","houseNumber":"12a","postalCode":"53111","city":"Bonn","state":"NRW","country":"Germany","type":"home"}}}'
